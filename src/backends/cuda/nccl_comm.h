// NCCL backend of exec::Communicator: one process driving several GPUs, one thread per GPU (each rank's
// calls come from one thread). NcclWorld creates every rank's communicator at once (ncclCommInitAll);
// tensors handed to a NcclCommunicator are device memory on its rank's device. Plain C++17 (no NCCL
// types); implemented in nccl_comm.cu. Where NCCL differs from the in-process backend (docs/gpu.md):
//  - Reduction order is NCCL's (ring / tree), not rank order: a sum differs from the in-process result by
//    rounding; every rank still receives the same bits (NCCL all-reduce results are identical across ranks).
//  - send is a rendezvous: it returns once the peer's matching recv has taken the data (no buffering), and
//    tags are not matched: messages between two ranks arrive in the order sent, whatever their tags.
//  - split() makes the sub-group's communicator with ncclCommInitRank from a unique id shared in-process
//    (only the listed ranks call it, as comm.h requires; ncclCommSplit would need every parent rank).
//  - abort() aborts this rank's communicator (ncclCommAbort) and marks the world aborted: peers waiting in a
//    collective see it within milliseconds, abort theirs and throw.
// Every NCCL and CUDA call is checked (InternalError naming the call, NCCL's error text and the device).
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "exec/comm/comm.h"

namespace braid::exec {

struct NcclOptions {
  std::chrono::milliseconds timeout{300'000};  // longest any single wait may last
  size_t scratch_bytes = size_t{64} << 20;     // per rank, for collectives along an axis other than 0
};

namespace detail {
struct NcclState;
}

class NcclWorld {
 public:
  // One rank per listed device (rank i on devices[i]).
  explicit NcclWorld(const std::vector<int>& devices, NcclOptions options = {});
  // Several processes: this process is rank host.rank() of host.size(), on `device`. Rank 0 makes NCCL's unique id
  // and `host` (the job's world: TCP between processes, or in-process) broadcasts it; every process calls join
  // with its own communicator of the same world. Later split()s share their ids over host.split() of the same
  // ranks, so `host` must outlive the world and must not be in use by another thread while a split runs. Only
  // communicator(host.rank()) exists in this process.
  static std::unique_ptr<NcclWorld> join(Communicator& host, int device, NcclOptions options = {});
  ~NcclWorld();
  NcclWorld(const NcclWorld&) = delete;
  NcclWorld& operator=(const NcclWorld&) = delete;
  int size() const;
  // The communicator of `rank`; once per rank. It keeps the world's state alive.
  std::unique_ptr<Communicator> communicator(int rank);
  void abort(const std::string& reason);

 private:
  NcclWorld() = default;
  std::shared_ptr<detail::NcclState> state_;
};

}  // namespace braid::exec
