// Device memory and streams for the CUDA backend, in a plain C++17 header (no CUDA types).
//  - DeviceArena: one cudaMalloc at construction, carved by a bump allocator; nothing is allocated inside a
//    step (reset() only rewinds). Freed once, in the destructor.
//  - Stream: a non-blocking stream on one device owning its cuBLAS, cuBLASLt and cuDNN handles, their
//    workspace and an error flag; ctx() hands kernels all of it. One stream per device and executor.
// Copies and synchronisation go through the stream; every call is checked (InternalError on failure).
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "backends/cuda/kernels/launch.h"

namespace braid::cuda {

// A device allocation the GPU's free memory cannot hold (cudaErrorMemoryAllocation): the sizes, so that the
// caller can say what asked for it (a batch too large for the GPU is the user's to change, not a bug).
struct DeviceOutOfMemory : std::runtime_error {
  DeviceOutOfMemory(int device, size_t wanted, size_t free_bytes, size_t total_bytes);
  int device;
  size_t wanted, free_bytes, total_bytes;
};

class DeviceArena {
 public:
  // Throws DeviceOutOfMemory when the device cannot hold `bytes`.
  DeviceArena(int device, size_t bytes);
  ~DeviceArena();
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;
  // `bytes` from the arena, 256-byte aligned; throws InternalError naming `what` when the arena is full.
  void* take(size_t bytes, const char* what);
  size_t used() const { return used_; }
  size_t capacity() const { return bytes_; }
  void reset(size_t to = 0) { used_ = to; }
  int device() const { return device_; }
  void* base() const { return base_; }

 private:
  int device_;
  void* base_ = nullptr;
  size_t bytes_ = 0, used_ = 0;
};

class Stream {
 public:
  // blas_workspace: bytes for cuBLAS / cuBLASLt (32 MiB covers Hopper's largest kernels).
  explicit Stream(int device, size_t blas_workspace = size_t{32} << 20);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  // A kernel context on this stream (workspace and RNG fields for the caller to fill).
  Ctx ctx() const;
  void synchronize() const;
  // Reads and clears the error flag (synchronises first). 0: no bad data seen.
  int take_error_flag();
  void upload(void* dst, const void* host, size_t bytes) const;   // asynchronous w.r.t. the host when pinned
  void download(void* host, const void* src, size_t bytes) const; // synchronises
  void memset(void* dst, int value, size_t bytes) const;
  int device() const { return device_; }
  void* raw() const { return stream_; }

 private:
  int device_;
  void* stream_ = nullptr;
  void* cublas_ = nullptr;
  void* cublaslt_ = nullptr;
  void* cudnn_ = nullptr;
  void* blas_ws_ = nullptr;
  size_t blas_ws_bytes_ = 0;
  int* error_flag_ = nullptr;
};

// Makes `device` current on the calling thread (checked).
void set_device(int device);
// Bytes of free and total memory on the current device.
void memory_info(size_t* free_bytes, size_t* total_bytes);
// Dense bf16 tensor-core peak of the current device in FLOP/s from its name (H100/H200 SXM: 989.4e12), 0 when
// unknown; for MFU reports (docs/benchmarks.md).
double dense_bf16_peak_flops(const std::string& device_name);

}  // namespace braid::cuda
