// The TCP communication backend: exec::Communicator for CPU tensors between processes, two TCP connections
// per pair of ranks of a group, one per direction (a full mesh, set up through the rendezvous store: each rank publishes
// host:port, lower ranks accept, higher ranks connect and prove the job's secret). Semantics are the
// in-process backend's (docs/communication.md), bit for bit: every reduction is folded in rank order by the
// owner of each chunk, then gathered (docs/distributed.md explains why this and not a ring).
// Every wait has a deadline; a peer that dies or closes its socket makes every waiting and later operation
// fail with an InternalError naming that rank; abort() reaches the peers as a message, then closes sockets.
// A Communicator is used by one thread at a time; a rank's world and its splits may run on different threads.
// Ranks on the same host move payloads of 64 KiB and more through a shared-memory ring per directed pair
// instead of the socket, and from 2 MiB the receiver copies them straight from the sender's memory where the
// system allows it (the socket still carries every header, so the protocol and failure handling are the
// same); BRAID_DIST_SHM=0 turns that off, =ring keeps the rings only (docs/distributed.md, "Same host").
#pragma once
#include <chrono>
#include <memory>
#include <string>

#include "distributed/store.h"
#include "exec/comm/comm.h"

namespace braid::dist {

struct TcpCommOptions {
  std::chrono::milliseconds timeout{300'000};          // the longest any single wait may last
  std::chrono::milliseconds connect_timeout{120'000};  // forming a group (all members must arrive)
  int mailbox_capacity = 1;      // send/recv messages a receiver buffers per (peer, tag) before its stream pauses
  std::string bind_host;         // address to listen on and advertise; "" = the one this process reaches the store from
  std::string key_prefix = "braid/comm";  // store keys of this world (one world per prefix and store)
  bool shm = true;  // shared-memory rings between ranks of one host (BRAID_DIST_SHM=0 in the environment: off)
  uint64_t shm_ring_bytes = uint64_t{4} << 20;  // per directed pair of a group (the receiver's memory)
  uint64_t shm_min_bytes = uint64_t{64} << 10;  // smaller payloads go over the socket
  bool shm_direct = true;  // receivers read large payloads from the sender's memory (BRAID_DIST_SHM=ring: off)
  uint64_t shm_direct_min_bytes = uint64_t{2} << 20;  // smaller payloads go through the ring (faster in cache)
};

// What a TCP communicator's transport has done (this rank, this group): how many peers it reaches through
// shared memory and how many payload bytes it has sent each way.
struct TcpCommStats {
  int shm_send_peers = 0;     // peers this rank writes payloads to through shared memory
  int shm_recv_peers = 0;     // peers whose payloads reach this rank through shared memory
  int direct_send_peers = 0;  // of shm_send_peers, those that read large payloads from this rank's memory
  uint64_t shm_bytes_sent = 0;     // payload bytes sent through shared memory (rings and direct reads)
  uint64_t direct_bytes_sent = 0;  // of them, read by the receiver from this rank's memory
  uint64_t socket_bytes_sent = 0;
};
// The statistics of a communicator from make_tcp_world (or split from one); InternalError for another backend.
TcpCommStats tcp_comm_stats(const exec::Communicator& comm);

// Rank `rank` of a world of `size` processes. Blocks until every rank has called it (or connect_timeout).
// The store must stay alive as long as any communicator of the world (splits use it to connect).
std::unique_ptr<exec::Communicator> make_tcp_world(std::shared_ptr<StoreClient> store, int rank, int size,
                                                   TcpCommOptions options = {});

}  // namespace braid::dist
