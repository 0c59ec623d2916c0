// Shared-memory rings of the TCP backend (internal to src/dist; used by tcp_transport.cpp): bulk payloads
// between ranks of one host travel through a ring per directed pair instead of the socket. The receiver
// creates the segment (shm_open, a random name, O_EXCL, mode 0600, pages allocated up front so a full /dev/shm
// fails here and not as a SIGBUS later); the sender opens it; the name is unlinked as soon as the sender has
// it mapped, so nothing is left in /dev/shm however the processes end afterwards.
// One producer (the sender's writing thread, under its peer's write lock), one consumer (the receiver
// thread). The ring knows nothing of frames: the sender tells the length of each chunk over the socket after
// the chunk is in the ring, so a receiver never waits on a ring. Only a sender waits, for space, on a futex
// word in the segment that the consumer bumps (and wakes, if a sender sleeps) after freeing space.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace braid::dist::detail {

// Identifies "the same host" for shared memory: boot id, host name and network namespace (ranks in different
// network namespaces are different hosts, as a launcher per namespace is told). "" when it cannot be read.
std::string same_host_key();

class ShmRing {
 public:
  // Receiver side: a new segment with `capacity` ring bytes under a fresh name (returned in `name`).
  // nullptr and `err` on failure (no /dev/shm, no space, ...).
  static std::unique_ptr<ShmRing> create(uint64_t capacity, std::string& name, std::string& err);
  // Sender side: maps the segment `name` (checking its layout). nullptr and `err` on failure.
  static std::unique_ptr<ShmRing> open(const std::string& name, std::string& err);
  static void unlink(const std::string& name);  // ignores a name already gone
  ~ShmRing();
  ShmRing(const ShmRing&) = delete;
  ShmRing& operator=(const ShmRing&) = delete;

  uint64_t capacity() const { return cap_; }

  // Producer. space(): bytes that may be put now. put(): copies n <= space() bytes in and publishes them.
  uint64_t space() const;
  void put(const std::byte* src, uint64_t n);
  // Sleeps until one of the rings (all this process's producer ends) may have space, or `max` passes. A
  // spurious return is possible: callers re-check space() and their own deadline, abort and peer state.
  static void wait_for_space(const std::vector<ShmRing*>& rings, std::chrono::microseconds max);

  // Consumer: copies the next n bytes into dst (nullptr: drops them), frees them, wakes a waiting producer.
  void take(std::byte* dst, uint64_t n);

 private:
  struct Header;
  ShmRing() = default;
  static std::unique_ptr<ShmRing> map(int fd, uint64_t capacity, bool init, std::string& err);
  void* base_ = nullptr;
  size_t map_bytes_ = 0;
  Header* h_ = nullptr;
  std::byte* data_ = nullptr;
  uint64_t cap_ = 0;
  uint64_t head_ = 0;  // producer: bytes put so far (private to the producer's process)
  uint64_t tail_ = 0;  // consumer: bytes taken so far (published in the header)
};

}  // namespace braid::dist::detail
