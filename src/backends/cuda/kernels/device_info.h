// CUDA device discovery (implemented in device_info.cu; compiled only when BRAID_WITH_CUDA is ON).
// Plain C++ header: no CUDA types leak out of the .cu files.
#pragma once
#include <string>

namespace braid::cuda {

// Number of visible CUDA devices; 0 (with the reason in *why_none) when there is no driver or GPU.
int device_count(std::string* why_none = nullptr);
std::string device_name(int device);

}  // namespace braid::cuda
