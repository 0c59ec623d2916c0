// CUDA device discovery for the GPU backend: how many devices this process sees and what they are.
// Every CUDA runtime call is checked; an absent driver or GPU is reported as zero devices, never a crash.
#include <cuda_runtime.h>

#include <string>

#include "backends/cuda/kernels/device_info.h"

namespace braid::cuda {

int device_count(std::string* why_none) {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    if (why_none) *why_none = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(err);
    return 0;
  }
  if (n == 0 && why_none) *why_none = "no CUDA device is visible";
  return n;
}

std::string device_name(int device) {
  cudaDeviceProp prop{};
  cudaError_t err = cudaGetDeviceProperties(&prop, device);
  if (err != cudaSuccess) return std::string("cuda:") + std::to_string(device) + " (" + cudaGetErrorString(err) + ")";
  return prop.name;
}

}  // namespace braid::cuda
