// DeviceArena and Stream (see runtime.h). All CUDA, cuBLAS and cuDNN calls checked.
#include "backends/cuda/kernels/check.h"
#include "backends/cuda/kernels/runtime.h"

#include <cstdio>
#include <string>

namespace braid::cuda {

void set_device(int device) { BRAID_CUDA_CHECK(cudaSetDevice(device)); }

void memory_info(size_t* free_bytes, size_t* total_bytes) { BRAID_CUDA_CHECK(cudaMemGetInfo(free_bytes, total_bytes)); }

double dense_bf16_peak_flops(const std::string& name) {
  if (name.find("H200") != std::string::npos || name.find("H100") != std::string::npos) {
    if (name.find("PCIe") != std::string::npos) return 756.0e12;
    return 989.4e12;  // SXM: 989.4 TFLOP/s dense bf16 (1979 with sparsity)
  }
  if (name.find("A100") != std::string::npos) return 312.0e12;
  return 0;
}

namespace {
std::string gib(size_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(b) / (1ull << 30));
  return buf;
}
}  // namespace

DeviceOutOfMemory::DeviceOutOfMemory(int d, size_t w, size_t f, size_t t)
    : std::runtime_error("CUDA device " + std::to_string(d) + ": cannot allocate " + gib(w) + " (" + gib(f) +
                         " free of " + gib(t) + ")"),
      device(d),
      wanted(w),
      free_bytes(f),
      total_bytes(t) {}

DeviceArena::DeviceArena(int device, size_t bytes) : device_(device), bytes_(bytes) {
  BRAID_CUDA_CHECK(cudaSetDevice(device));
  if (!bytes_) return;
  const cudaError_t e = cudaMalloc(&base_, bytes_);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear it: the context stays usable
    base_ = nullptr;
    size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    throw DeviceOutOfMemory(device, bytes_, free_bytes, total_bytes);
  }
  BRAID_CUDA_CHECK(e);
}

DeviceArena::~DeviceArena() {
  if (base_) {
    cudaSetDevice(device_);
    cudaFree(base_);  // no throw from a destructor
  }
}

void* DeviceArena::take(size_t bytes, const char* what) {
  size_t at = (used_ + 255) / 256 * 256;
  if (at + bytes > bytes_)
    throw InternalError(std::string("device arena of cuda:") + std::to_string(device_) + " is full: " + what +
                        " needs " + std::to_string(bytes) + " bytes at offset " + std::to_string(at) + " of " +
                        std::to_string(bytes_));
  used_ = at + bytes;
  return static_cast<char*>(base_) + at;
}

Stream::Stream(int device, size_t blas_workspace) : device_(device), blas_ws_bytes_(blas_workspace) {
  BRAID_CUDA_CHECK(cudaSetDevice(device));
  cudaStream_t s;
  BRAID_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  stream_ = s;
  cublasHandle_t h;
  BRAID_CUBLAS_CHECK(cublasCreate(&h));
  cublas_ = h;
  BRAID_CUBLAS_CHECK(cublasSetStream(h, s));
  // Pure fp32 GEMMs (no TF32) so that f32 results match the CPU kernels to ~1e-6.
  BRAID_CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
  cublasLtHandle_t lt;
  BRAID_CUBLAS_CHECK(cublasLtCreate(&lt));
  cublaslt_ = lt;
  cudnnHandle_t dnn;
  BRAID_CUDNN_CHECK(cudnnCreate(&dnn));
  cudnn_ = dnn;
  BRAID_CUDNN_CHECK(cudnnSetStream(dnn, s));
  if (blas_ws_bytes_) {
    BRAID_CUDA_CHECK(cudaMalloc(&blas_ws_, blas_ws_bytes_));
    BRAID_CUBLAS_CHECK(cublasSetWorkspace(h, blas_ws_, blas_ws_bytes_));
  }
  BRAID_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&error_flag_), sizeof(int)));
  BRAID_CUDA_CHECK(cudaMemsetAsync(error_flag_, 0, sizeof(int), s));
}

Stream::~Stream() {
  cudaSetDevice(device_);
  if (stream_) cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  if (cudnn_) cudnnDestroy(static_cast<cudnnHandle_t>(cudnn_));
  if (cublaslt_) cublasLtDestroy(static_cast<cublasLtHandle_t>(cublaslt_));
  if (cublas_) cublasDestroy(static_cast<cublasHandle_t>(cublas_));
  if (blas_ws_) cudaFree(blas_ws_);
  if (error_flag_) cudaFree(error_flag_);
  if (stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

Ctx Stream::ctx() const {
  Ctx c;
  c.stream = stream_;
  c.cublas = cublas_;
  c.cublaslt = cublaslt_;
  c.cudnn = cudnn_;
  c.blas_workspace = blas_ws_;
  c.blas_workspace_bytes = blas_ws_bytes_;
  c.error_flag = error_flag_;
  c.device = device_;
  return c;
}

void Stream::synchronize() const { BRAID_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_))); }

int Stream::take_error_flag() {
  int v = 0;
  auto s = static_cast<cudaStream_t>(stream_);
  BRAID_CUDA_CHECK(cudaMemcpyAsync(&v, error_flag_, sizeof(int), cudaMemcpyDeviceToHost, s));
  BRAID_CUDA_CHECK(cudaStreamSynchronize(s));
  if (v) BRAID_CUDA_CHECK(cudaMemsetAsync(error_flag_, 0, sizeof(int), s));
  return v;
}

void Stream::upload(void* dst, const void* host, size_t bytes) const {
  if (bytes)
    BRAID_CUDA_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream_)));
}

void Stream::download(void* host, const void* src, size_t bytes) const {
  auto s = static_cast<cudaStream_t>(stream_);
  if (bytes) BRAID_CUDA_CHECK(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, s));
  BRAID_CUDA_CHECK(cudaStreamSynchronize(s));
}

void Stream::memset(void* dst, int value, size_t bytes) const {
  if (bytes) BRAID_CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, static_cast<cudaStream_t>(stream_)));
}

}  // namespace braid::cuda
