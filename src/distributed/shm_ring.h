// Shared-memory rings of the TCP backend (internal to src/distributed; used by tcp_transport.cpp): bulk payloads
// between ranks of one host travel through a ring per directed pair instead of the socket. The receiver
// creates the segment (shm_open, a random name, O_EXCL, mode 0600, pages allocated up front so a full /dev/shm
// fails here and not as a SIGBUS later); the sender opens it; the name is unlinked as soon as the sender has
// it mapped, so nothing is left in /dev/shm however the processes end afterwards.
// One producer (the sender's writing thread, under its peer's write lock), one consumer (the receiver
// thread). The ring knows nothing of frames: the sender tells the length of each chunk over the socket after
// the chunk is in the ring, so a receiver never waits on a ring. Only a sender waits, for space, on a futex
// word in the segment that the consumer bumps (and wakes, if a sender sleeps) after freeing space.
// Direct frames: where the receiver may read the sender's memory (process_vm_readv; probed at setup), a large
// payload is not put in the ring at all: the sender tells its address over the socket, the receiver copies
// it straight into its destination (one copy instead of two) and acknowledges it in the segment; the sender
// waits for that before it returns, as for ring space. A sender that gives up first marks the frame
// cancelled, and the receiver, checking after its copy, drops it (its bytes may have been overwritten).
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
  // rewind(): when the ring is empty and the next put would start `min_at` or more bytes into it, moves it
  // to the ring's start (so that small frames keep reusing the same, cache-hot bytes) and returns the bytes
  // skipped, which the consumer must skip too (0 otherwise).
  uint64_t space() const;
  void put(const std::byte* src, uint64_t n);
  uint64_t rewind(uint64_t min_at);
  // Direct frames, producer side: the number of the next direct frame; whether the consumer has copied frame
  // k; giving up frames up to k.
  uint64_t next_direct() { return ++direct_sent_; }
  bool acked(uint64_t k) const;
  void cancel(uint64_t k);
  // Sleeps until the consumer of one of the rings (all this process's producer ends) has taken or acknowledged
  // something, or `max` passes, unless ready() is already true once every ring's waiting flag is set. A
  // spurious return is possible: callers re-check their condition, deadline, abort and peer state.
  template <typename Ready>
  static void wait(const std::vector<ShmRing*>& rings, Ready ready, std::chrono::microseconds max) {
    if (arm(rings) && !ready()) sleep(rings, max);
    disarm(rings);
  }

  // Consumer: skips `skip` bytes (a producer's rewind), copies the next n bytes into dst (nullptr: drops
  // them), frees them, wakes a waiting producer.
  void take(std::byte* dst, uint64_t n, uint64_t skip = 0);
  // Consumer, direct frames: whether it can read the producer's probe word (at setup); copies n bytes at the producer's address (false and errno on failure); the number
  // of the next direct frame; whether the producer gave it up; acknowledging it (wakes the producer).
  bool probe_producer();
  bool read_direct(std::byte* dst, uint64_t addr, uint64_t n);
  uint64_t take_direct() { return ++direct_taken_; }
  bool cancelled(uint64_t k) const;
  void ack_direct();

 private:
  struct Header;
  ShmRing() = default;
  static std::unique_ptr<ShmRing> map(int fd, uint64_t capacity, bool init, std::string& err);
  static bool arm(const std::vector<ShmRing*>& rings);  // records each futex word; false if none
  static void sleep(const std::vector<ShmRing*>& rings, std::chrono::microseconds max);
  static void disarm(const std::vector<ShmRing*>& rings);
  void wake();
  void* base_ = nullptr;
  size_t map_bytes_ = 0;
  Header* h_ = nullptr;
  std::byte* data_ = nullptr;
  uint64_t cap_ = 0;
  uint64_t head_ = 0;  // producer: bytes put so far (private to the producer's process)
  uint64_t tail_ = 0;  // consumer: bytes taken so far (published in the header)
  uint64_t direct_sent_ = 0, direct_taken_ = 0;
  uint32_t armed_seq_ = 0;  // producer: the futex word's value when it last armed
};

}  // namespace braid::dist::detail
