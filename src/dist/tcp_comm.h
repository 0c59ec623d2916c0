// The TCP communication backend: exec::Communicator for CPU tensors between processes, two TCP connections
// per pair of ranks of a group, one per direction (a full mesh, set up through the rendezvous store: each rank publishes
// host:port, lower ranks accept, higher ranks connect and prove the job's secret). Semantics are the
// in-process backend's (docs/communication.md), bit for bit: every reduction is folded in rank order by the
// owner of each chunk, then gathered (docs/distributed.md explains why this and not a ring).
// Every wait has a deadline; a peer that dies or closes its socket makes every waiting and later operation
// fail with an InternalError naming that rank; abort() reaches the peers as a message, then closes sockets.
// A Communicator is used by one thread at a time; a rank's world and its splits may run on different threads.
#pragma once
#include <chrono>
#include <memory>
#include <string>

#include "dist/store.h"
#include "exec/comm/comm.h"

namespace braid::dist {

struct TcpCommOptions {
  std::chrono::milliseconds timeout{300'000};          // the longest any single wait may last
  std::chrono::milliseconds connect_timeout{120'000};  // forming a group (all members must arrive)
  int mailbox_capacity = 1;      // send/recv messages a receiver buffers per (peer, tag) before its stream pauses
  std::string bind_host;         // address to listen on and advertise; "" = the one this process reaches the store from
  std::string key_prefix = "braid/comm";  // store keys of this world (one world per prefix and store)
};

// Rank `rank` of a world of `size` processes. Blocks until every rank has called it (or connect_timeout).
// The store must stay alive as long as any communicator of the world (splits use it to connect).
std::unique_ptr<exec::Communicator> make_tcp_world(std::shared_ptr<StoreClient> store, int rank, int size,
                                                   TcpCommOptions options = {});

}  // namespace braid::dist
