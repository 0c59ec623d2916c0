// Device-side helpers shared by the .cu files: element types (float, bf16; f16 for autocast copies) and
// conversions, dtype dispatch,
// grid sizing, block reductions in double, and the counter-based hash of core/rng.h ported bit for bit.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "backends/cuda/kernels/check.h"
#include "backends/cuda/kernels/launch.h"

namespace braid::cuda {

using bf16 = __nv_bfloat16;
using f16 = __half;

__host__ __device__ inline float to_f(float x) { return x; }
__device__ inline float to_f(bf16 x) { return __bfloat162float(x); }
__device__ inline float to_f(f16 x) { return __half2float(x); }
template <typename T>
__device__ inline T from_f(float x);
template <>
__device__ inline float from_f<float>(float x) { return x; }
template <>
__device__ inline bf16 from_f<bf16>(float x) { return __float2bfloat16_rn(x); }
template <>
__device__ inline f16 from_f<f16>(float x) { return __float2half_rn(x); }
// Element i of an autocast copy (Ctx::autocast_type): fp16 when `half`, else bf16; round to nearest even.
__device__ inline void store_autocast(void* p, int64_t i, float v, bool half) {
  if (half) static_cast<f16*>(p)[i] = __float2half_rn(v);
  else static_cast<bf16*>(p)[i] = __float2bfloat16_rn(v);
}
template <typename T>
__device__ inline T from_d(double x) { return from_f<T>(static_cast<float>(x)); }

inline cudaStream_t stream_of(const Ctx& c) { return static_cast<cudaStream_t>(c.stream); }

inline unsigned blocks_for(int64_t n, int threads = 256) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > 65535LL * 32) b = 65535LL * 32;  // grid-stride loops cover the rest
  return static_cast<unsigned>(b);
}

#define BRAID_GRID_LOOP(i, n) \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// Calls fn(T{}) with T = float for f32 and bf16 for bf16; other dtypes are a clear InternalError.
template <typename F>
void dispatch(DType t, const char* what, F&& fn) {
  if (t == DType::f32) {
    fn(float{});
  } else if (t == DType::bf16) {
    fn(bf16{});
  } else {
    throw InternalError(std::string("CUDA kernel ") + what + " has no " + std::string(dtype_name(t)) +
                        " version (f32 and bf16 run on GPU)");
  }
}
template <typename F>
void dispatch_f32(DType t, const char* what, F&& fn) {
  if (t != DType::f32)
    throw InternalError(std::string("CUDA kernel ") + what + " has no " + std::string(dtype_name(t)) +
                        " version (f32 only)");
  fn(float{});
}

// Sum of v over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
__device__ inline double block_sum(double v) {
  __shared__ double part[32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) part[warp] = v;
  __syncthreads();
  int warps = (blockDim.x + 31) >> 5;
  double r = 0;
  for (int w = 0; w < warps; ++w) r += part[w];  // fixed order: deterministic
  return r;
}

__device__ inline float block_max(float v) {
  __shared__ float part[32];
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, o));
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) part[warp] = v;
  __syncthreads();
  int warps = (blockDim.x + 31) >> 5;
  float r = part[0];
  for (int w = 1; w < warps; ++w) r = fmaxf(r, part[w]);
  return r;
}

// core/rng.h, bit for bit: splitmix64 finaliser and uniform_at.
__device__ inline uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
__device__ inline double uniform_at(uint64_t key, uint64_t index) {
  return static_cast<double>(mix64(key ^ mix64(index)) >> 11) * (1.0 / 9007199254740992.0);
}

__device__ inline int64_t load_id(const void* ids, bool i64, int64_t i) {
  return i64 ? static_cast<const int64_t*>(ids)[i] : static_cast<const int32_t*>(ids)[i];
}

}  // namespace braid::cuda
