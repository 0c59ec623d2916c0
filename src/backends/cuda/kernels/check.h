// Checks for every CUDA runtime, cuBLAS(Lt), cuDNN and NCCL call: a failure throws braid::InternalError
// naming the call as written, the library's error text, the device and file:line. Included only by .cu
// files (it needs the CUDA headers); C++17.
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <string>

#include "core/error.h"

namespace braid::cuda::detail {

inline int current_device() {
  int d = -1;
  if (cudaGetDevice(&d) != cudaSuccess) return -1;
  return d;
}

[[noreturn]] inline void fail(const char* lib, const char* call, const std::string& err, const char* file, int line) {
  throw InternalError(std::string(lib) + " call failed: " + call + ": " + err + " (device cuda:" +
                      std::to_string(current_device()) + ", " + file + ":" + std::to_string(line) + ")");
}

inline const char* cublas_error_text(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "unknown cuBLAS status";
  }
}

}  // namespace braid::cuda::detail

#define BRAID_CUDA_CHECK(call)                                                                          \
  do {                                                                                                  \
    cudaError_t braid_err_ = (call);                                                                    \
    if (braid_err_ != cudaSuccess)                                                                      \
      ::braid::cuda::detail::fail("CUDA", #call, cudaGetErrorString(braid_err_), __FILE__, __LINE__);   \
  } while (0)

#define BRAID_CUBLAS_CHECK(call)                                                                        \
  do {                                                                                                  \
    cublasStatus_t braid_st_ = (call);                                                                  \
    if (braid_st_ != CUBLAS_STATUS_SUCCESS)                                                             \
      ::braid::cuda::detail::fail("cuBLAS", #call, ::braid::cuda::detail::cublas_error_text(braid_st_), \
                                  __FILE__, __LINE__);                                                  \
  } while (0)

#define BRAID_CUDNN_CHECK(call)                                                                         \
  do {                                                                                                  \
    cudnnStatus_t braid_st_ = (call);                                                                   \
    if (braid_st_ != CUDNN_STATUS_SUCCESS)                                                              \
      ::braid::cuda::detail::fail("cuDNN", #call, cudnnGetErrorString(braid_st_), __FILE__, __LINE__);  \
  } while (0)

// After every kernel launch: launch-configuration errors surface here, naming the kernel.
#define BRAID_LAUNCH_CHECK(what)                                                                        \
  do {                                                                                                  \
    cudaError_t braid_err_ = cudaGetLastError();                                                        \
    if (braid_err_ != cudaSuccess)                                                                      \
      ::braid::cuda::detail::fail("CUDA", "launch of " what, cudaGetErrorString(braid_err_), __FILE__, __LINE__); \
  } while (0)
