// Data movement: plain and 2-D device copies on the stream (concat, slice, flatten, reshape are made of
// these) and a strided gather for transpose. Bytes only: every dtype works.
#include "backends/cuda/kernels/device_util.cuh"

namespace braid::cuda {
namespace {

template <typename E>
__global__ void gather_kernel(const E* x, BcastIndex idx, E* y, int64_t n) {
  BRAID_GRID_LOOP(i, n) {
    int64_t off = 0, rem = i;
    for (int k = idx.rank - 1; k >= 0; --k) {
      off += (rem % idx.dims[k]) * idx.strides[k];
      rem /= idx.dims[k];
    }
    y[i] = x[off];
  }
}

}  // namespace

void copy(const Ctx& c, void* dst, const void* src, size_t bytes) {
  if (bytes == 0 || dst == src) return;
  BRAID_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_of(c)));
}

void copy_2d(const Ctx& c, void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height) {
  if (width == 0 || height == 0) return;
  BRAID_CUDA_CHECK(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, cudaMemcpyDeviceToDevice, stream_of(c)));
}

void gather_strided(const Ctx& c, size_t elem_size, const void* x, const BcastIndex& idx, void* y, int64_t n) {
  if (n == 0) return;
  auto s = stream_of(c);
  switch (elem_size) {
    case 2: gather_kernel<uint16_t><<<blocks_for(n), 256, 0, s>>>(static_cast<const uint16_t*>(x), idx, static_cast<uint16_t*>(y), n); break;
    case 4: gather_kernel<uint32_t><<<blocks_for(n), 256, 0, s>>>(static_cast<const uint32_t*>(x), idx, static_cast<uint32_t*>(y), n); break;
    case 8: gather_kernel<uint64_t><<<blocks_for(n), 256, 0, s>>>(static_cast<const uint64_t*>(x), idx, static_cast<uint64_t*>(y), n); break;
    default: throw InternalError("gather_strided: elements of " + std::to_string(elem_size) + " bytes");
  }
  BRAID_LAUNCH_CHECK("gather_kernel");
}

}  // namespace braid::cuda
