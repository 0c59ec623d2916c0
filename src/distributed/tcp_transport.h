// The TCP backend's transport (internal to src/distributed): a Mesh is one group's connections, two sockets per
// peer (one it writes, one it reads), with a receiver thread that reads every socket at once and files each frame by (peer, kind,
// channel): straight into memory a caller has posted for it (no copy), or into a buffered message.
// Writers are the communicator's caller thread; several peers are written at once with poll(2), so no
// exchange pattern can deadlock on full socket buffers. A Process holds what the groups of one process
// share: the abort state, the secret, the store and the split counters.
// Invariants: a posted buffer is touched by the receiver only between post() and the end of take()/unpost();
// after the receiver thread exits no buffer is touched. Frames of one (peer, kind, channel) arrive in order.
// A peer on the same host may also have a shared-memory ring per direction (shm_ring.h): a frame's payload of
// at least TcpCommOptions::shm_min_bytes then goes through the ring in chunks, while its header, signature and
// each chunk's length still go over the socket, so ordering, waking, abort and loss detection stay the socket's.
#pragma once
#include <sys/uio.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "distributed/shm_ring.h"
#include "distributed/tcp_comm.h"

namespace braid::dist::detail {

using Clock = std::chrono::steady_clock;

enum class FrameKind : uint8_t { Coll = 1, P2P = 2, Abort = 3, Bye = 4 };

struct Mesh;

// BRAID_DIST_DEBUG=1: the transport's setup decisions on stderr.
void debug(const std::string& line);
inline double secs(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

struct Process {
  std::shared_ptr<StoreClient> store;
  TcpCommOptions options;
  int world_rank = 0;
  std::string secret;

  std::atomic<bool> aborted{false};
  std::mutex mu;  // guards the fields below
  std::string abort_reason;
  std::vector<Mesh*> meshes;  // live meshes of this process (each unregisters itself first thing in close())
  std::map<std::vector<int>, int> split_count;  // sorted world ranks -> splits made by this process

  // Marks the process aborted, tells every peer of every group, closes the sockets. The reason recorded is
  // the job's first (agree()), not necessarily this call's.
  void abort(const std::string& reason);
  std::string reason();
  // The first failure of the job: records `reason` in the store unless another rank recorded one before
  // (then returns that one). Falls back to `reason` when the store cannot be reached.
  std::string agree(const std::string& reason);
  std::mutex agree_mu;
  std::unique_ptr<StoreClient> abort_store;  // a connection of its own: the shared one may be in a long wait
};

// One frame's destination, posted by a caller before the frame may arrive.
struct Posted {
  std::byte* data = nullptr;
  uint64_t bytes = 0;
  bool done = false;      // the frame has arrived (whole)
  bool size_ok = true;    // false: the frame had another size; its payload was dropped
  bool in_read = false;   // the receiver is writing into data right now
  bool cancelled = false; // the caller gave up; the receiver must not write any more
  bool header = false;    // the frame's header has arrived: sig and size_ok are known (or it is done)
  uint64_t got = 0;       // payload bytes already in data (a caller may use a prefix before done)
  std::string sig;        // the sender's signature of the call
};

struct Message {
  std::string sig;
  std::vector<std::byte> payload;
};

struct Peer {
  // One connection per direction: the kernel holds a socket's lock through every sendmsg's and recvmsg's
  // copy, so a single full-duplex socket makes this rank's sending and receiving copies take turns.
  int fd = -1;   // the peer's frames arrive here (read by the receiver thread only)
  int wfd = -1;  // this rank's frames to the peer go here (written under write_mu)
  int world_rank = 0;
  std::mutex write_mu;
  std::unique_ptr<ShmRing> out_ring;  // same host: this rank's bulk payloads to the peer (written under write_mu)
  std::unique_ptr<ShmRing> in_ring;   // same host: the peer's bulk payloads to this rank (receiver thread)
  bool out_direct = false;            // the peer reads this rank's large payloads from its memory
  // receiver-thread state
  enum class Stage : uint8_t { Header, Sig, Paused, Payload, Done } stage = Stage::Header;
  std::array<std::byte, 32> header{};
  size_t got = 0;
  FrameKind kind = FrameKind::Coll;
  int64_t channel = 0;
  uint64_t payload_bytes = 0;
  std::string sig;
  std::byte* dst = nullptr;          // where the payload goes (posted data, message buffer or scratch)
  Posted* posted = nullptr;
  bool discard = false;              // the frame's posted receiver gave up: drop the rest
  bool via_ring = false;             // the payload is in in_ring; the socket carries each chunk's length
  bool via_direct = false;           // the payload is read from the peer's memory; the socket carries its address
  std::array<std::byte, 16> notice{}; // (bytes skipped, chunk length) or (address, 0) being read
  size_t notice_got = 0;
  std::vector<std::byte> buffer;     // a buffered message's payload being read
  bool closed = false;               // sent a bye or lost (guarded by Mesh::mu)
  std::string closed_reason;
};

using Key = std::tuple<int, FrameKind, int64_t>;  // (peer group rank, kind, channel)

struct Mesh {
  std::shared_ptr<Process> proc;
  std::string name;              // "[0, 2]" (world ranks), for messages
  std::vector<int> world_ranks;  // group rank i is world rank world_ranks[i]
  int rank = 0;
  std::vector<std::unique_ptr<Peer>> peers;  // by group rank; peers[rank] unused

  std::mutex mu;  // guards posted, inbox, Peer::closed, Peer::Paused
  std::condition_variable cv;
  std::map<Key, Posted*> posted;
  std::map<Key, std::vector<Message>> inbox;  // FIFO per key
  int wake_fd = -1;                            // eventfd: unpause or stop the receiver
  std::atomic<bool> stopping{false};
  std::thread receiver;
  // Payload bytes this rank has written through shared memory (rings or direct reads), of them direct, and
  // through sockets (tcp_comm_stats()).
  std::atomic<uint64_t> ring_bytes_sent{0}, direct_bytes_sent{0}, socket_bytes_sent{0};

  int size() const { return static_cast<int>(world_ranks.size()); }
  ~Mesh();

  // Sets up this rank's connections to every other member (through `store`) and starts the receiver.
  void connect(const std::string& group_id, StoreClient& store);

  // Caller side. post(): the next frame for key lands in p (or completes it from the inbox at once).
  void post(const Key& key, Posted& p);
  // Waits until every posted entry is done or a member it waits on is gone, the process aborts or the
  // deadline passes; returns "" or what went wrong (the entries are unposted either way).
  std::string take(const std::vector<std::pair<Key, Posted*>>& entries, Clock::time_point deadline);
  // As take(), but returns "" as soon as every entry is done or satisfies `enough` (called under mu), and
  // then leaves the entries posted (take() them later). On an error the entries are unposted, as by take().
  template <typename Enough>
  std::string await(const std::vector<std::pair<Key, Posted*>>& entries, Enough enough, Clock::time_point deadline);
  void unpost(const Key& key, Posted& p);
  // Writes one frame to each listed peer, all at once; returns "" or the error (naming the peer).
  struct Out {
    int peer;
    FrameKind kind;
    int64_t channel;
    std::string sig;
    const std::byte* data;
    uint64_t bytes;
  };
  std::string write(const std::vector<Out>& outs, Clock::time_point deadline);
  // A send/recv message from this rank to itself: into its own mailbox, waiting while that is full.
  std::string send_to_self(int64_t tag, const std::string& sig, const std::byte* data, uint64_t bytes,
                           Clock::time_point deadline);
  void wake();  // the receiver thread re-checks paused peers (or stops)

  void shutdown_sockets();             // makes every read and write fail promptly
  void send_abort(const std::string& reason);  // best effort: skips a peer whose stream is mid-frame
  void close();                        // bye to every peer, stop the receiver, close the sockets

 private:
  std::string wait_entries(const std::vector<std::pair<Key, Posted*>>& entries,
                           const std::function<bool(const Posted&)>& enough, Clock::time_point deadline);
  void setup_shm(const std::string& prefix, StoreClient& store, Clock::time_point deadline);
  void receive_loop();
  void receive();
  bool on_readable(int j);  // false when the peer is gone
  // A ring or direct payload of peer j (tcp_transport_shm.cpp): Again when its socket has nothing more now,
  // Gone when the peer is lost (lose() done), More to go on reading.
  enum class ShmRead { Again, Gone, More };
  // The socket's 16-byte notice of the next chunk or address: nullopt once it is whole, else Again or Gone.
  std::optional<ShmRead> read_notice(int j);
  ShmRead read_direct_payload(int j);
  ShmRead read_ring_payload(int j);
  void frame_ready(int j);
  void lose(int j, const std::string& why);
};

template <typename Enough>
std::string Mesh::await(const std::vector<std::pair<Key, Posted*>>& entries, Enough enough, Clock::time_point deadline) {
  return wait_entries(entries, std::function<bool(const Posted&)>(std::move(enough)), deadline);
}

}  // namespace braid::dist::detail
