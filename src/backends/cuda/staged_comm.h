// A Communicator over device tensors for ranks that share a GPU (NCCL refuses two ranks on one device): every
// operation copies its device tensors to host memory, runs the in-process backend's operation (rank order, the
// CPU's results bit for bit) and copies the results back, on a stream of the rank's device (`stream`, which the
// caller keeps alive). The callers synchronise their own streams before a collective (CudaExecutor does, and so
// do the engines), so the copies see finished values; each operation synchronises `stream` before returning.
// Slow (host round trips) and meant for trying, and testing, data-parallel and pipeline plans on one GPU.
#pragma once
#include <memory>

#include "exec/comm/comm.h"
#include "backends/cuda/kernels/runtime.h"

namespace braid::exec {

std::unique_ptr<Communicator> host_staged(std::unique_ptr<Communicator> host, cuda::Stream& stream);

}  // namespace braid::exec
