// The in-process backend: N logical devices in one process, one caller thread per rank. A shared
// InProcWorld hands out one Communicator per rank; collectives exchange pointers through the group's slots
// and synchronise on a condition-variable barrier (no spinning); send/recv go through bounded
// per-(src, dst, tag) mailboxes. Every wait has a deadline: a timeout, a mismatched collective or abort()
// fails with an InternalError naming the operation, the ranks and the tag instead of hanging.
// A Communicator is used by one thread at a time; the communicators of one rank may run on different threads.
#pragma once
#include <chrono>
#include <memory>
#include <string>

#include "exec/comm/comm.h"

namespace braid::exec {

struct InProcOptions {
  std::chrono::milliseconds timeout{300'000};  // longest any single wait may last
  int mailbox_capacity = 1;                     // messages buffered per (src, dst, tag) before send blocks
};

namespace detail {
struct InProcState;
}

class InProcWorld {
 public:
  explicit InProcWorld(int size, InProcOptions options = {});
  ~InProcWorld();
  InProcWorld(const InProcWorld&) = delete;
  InProcWorld& operator=(const InProcWorld&) = delete;

  int size() const;
  // The communicator of `rank` over all ranks; once per rank. It keeps the world's state alive.
  std::unique_ptr<Communicator> communicator(int rank);
  // Every pending and later operation of every rank fails with `reason`. After a timeout the world is
  // aborted the same way (its groups' state is no longer consistent).
  void abort(const std::string& reason);

 private:
  std::shared_ptr<detail::InProcState> state_;
};

}  // namespace braid::exec
