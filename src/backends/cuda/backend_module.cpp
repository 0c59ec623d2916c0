// The entry point of the CUDA backend module (libbraid_cuda.so, exec/backend.h): braid dlopens it when a run
// names cuda devices, and only then are the CUDA runtime, cuBLAS, cuDNN and NCCL mapped. Built into the module
// only, never into the braid binary or the static braid_exec_cuda the gpu tests link.
#include "exec/backend.h"
#include "backends/cuda/cuda_backend.h"

// Returns 0 once the backend is registered, or this module's interface version when `abi` is another.
extern "C" __attribute__((visibility("default"))) int braid_backend_init(int abi) {
  if (abi != braid::exec::kBackendAbi) return braid::exec::kBackendAbi;
  braid::exec::install_cuda_backend();
  return 0;
}
