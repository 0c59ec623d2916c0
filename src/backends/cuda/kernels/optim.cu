// Fused multi-tensor AdamW and SGD: one launch updates every parameter. A device table of ParamSlot (built
// once, from the arena) lists the tensors; blockIdx.y picks the tensor, a grid-stride loop its elements.
// Arithmetic is backends/cpu/optimizer.cpp's, operation for operation, with explicitly rounded fp32 operations (no
// FMA contraction), so that the update equals the CPU's (torch.optim single-tensor path) bit for bit.
#include <cmath>

#include "backends/cuda/kernels/device_util.cuh"

namespace braid::cuda {
namespace {

__global__ void adamw_kernel(const ParamSlot* slots, float b1, float b2, float eps, float decay, float step_size,
                             float bc2_sqrt) {
  ParamSlot s = slots[blockIdx.y];
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < s.n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float p = __fmul_rn(s.p[i], decay), g = s.g[i];
    float m = __fadd_rn(__fmul_rn(s.m[i], b1), __fmul_rn(g, __fsub_rn(1.f, b1)));
    float v = __fadd_rn(__fmul_rn(s.v[i], b2), __fmul_rn(__fmul_rn(g, g), __fsub_rn(1.f, b2)));
    float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), bc2_sqrt), eps);
    s.m[i] = m;
    s.v[i] = v;
    const float np = __fsub_rn(p, __fmul_rn(step_size, __fdiv_rn(m, denom)));
    s.p[i] = np;
    if (s.p16) store_autocast(s.p16, i, np, s.p16_half != 0);
  }
}

__global__ void sgd_kernel(const ParamSlot* slots, float lr, float mom, float damp, float wd, bool use_wd,
                           bool nesterov, bool first) {
  ParamSlot s = slots[blockIdx.y];
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < s.n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float d = s.g[i];
    if (use_wd) d = __fadd_rn(d, __fmul_rn(wd, s.p[i]));
    if (s.m) {
      float b = first ? d : __fadd_rn(__fmul_rn(mom, s.m[i]), __fmul_rn(__fsub_rn(1.f, damp), d));
      s.m[i] = b;
      d = nesterov ? __fadd_rn(d, __fmul_rn(mom, b)) : b;
    }
    const float np = __fsub_rn(s.p[i], __fmul_rn(lr, d));
    s.p[i] = np;
    if (s.p16) store_autocast(s.p16, i, np, s.p16_half != 0);
  }
}

// Sum of g^2 over every slot's gradient in double: a block's partial sums reduced in shared memory, one
// atomicAdd per block (order-dependent in the last bits of a double; the CPU's sum is in fixed pieces).
__global__ void grad_sum_squares_kernel(const ParamSlot* slots, double* out) {
  __shared__ double part[256];
  ParamSlot s = slots[blockIdx.y];
  double acc = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < s.n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const double g = s.g[i];
    acc += g * g;
  }
  part[threadIdx.x] = acc;
  __syncthreads();
  for (unsigned k = blockDim.x / 2; k > 0; k >>= 1) {
    if (threadIdx.x < k) part[threadIdx.x] += part[threadIdx.x + k];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(out, part[0]);
}

// g *= k over every slot's gradient, in fp32 as exec::scale_in_place.
__global__ void grad_scale_kernel(const ParamSlot* slots, float k) {
  ParamSlot s = slots[blockIdx.y];
  float* g = const_cast<float*>(s.g);  // the optimizer's own accumulators, or the graph's gradient values
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < s.n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    g[i] = __fmul_rn(g[i], k);
}

dim3 grid_for(int count, int64_t max_n) {
  int64_t x = (max_n + 255) / 256;
  if (x > 1024) x = 1024;
  if (x < 1) x = 1;
  return dim3(static_cast<unsigned>(x), static_cast<unsigned>(count));
}

}  // namespace

size_t multi_tensor_table_bytes(int count) { return static_cast<size_t>(count) * sizeof(ParamSlot); }

void upload_slots(const Ctx& c, const ParamSlot* slots, int count, void* table) {
  if (count == 0) return;
  BRAID_CUDA_CHECK(cudaMemcpyAsync(table, slots, multi_tensor_table_bytes(count), cudaMemcpyHostToDevice, stream_of(c)));
  BRAID_CUDA_CHECK(cudaStreamSynchronize(stream_of(c)));  // `slots` may be a temporary
}

void adamw(const Ctx& c, const void* table, int count, int64_t max_n, double lr, double beta1, double beta2,
           double eps, double weight_decay, int64_t step) {
  if (count == 0) return;
  const double bc1 = 1 - std::pow(beta1, static_cast<double>(step));
  const double bc2 = 1 - std::pow(beta2, static_cast<double>(step));
  adamw_kernel<<<grid_for(count, max_n), 256, 0, stream_of(c)>>>(
      static_cast<const ParamSlot*>(table), static_cast<float>(beta1), static_cast<float>(beta2),
      static_cast<float>(eps), static_cast<float>(1 - lr * weight_decay), static_cast<float>(lr / bc1),
      static_cast<float>(std::sqrt(bc2)));
  BRAID_LAUNCH_CHECK("adamw_kernel");
}

void sgd(const Ctx& c, const void* table, int count, int64_t max_n, double lr, double momentum, double dampening,
         double weight_decay, bool nesterov, bool first) {
  if (count == 0) return;
  sgd_kernel<<<grid_for(count, max_n), 256, 0, stream_of(c)>>>(
      static_cast<const ParamSlot*>(table), static_cast<float>(lr), static_cast<float>(momentum),
      static_cast<float>(dampening), static_cast<float>(weight_decay), weight_decay != 0, nesterov, first);
  BRAID_LAUNCH_CHECK("sgd_kernel");
}

void grad_sum_squares(const Ctx& c, const void* table, int count, int64_t max_n, double* out) {
  BRAID_CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof(double), stream_of(c)));
  if (count == 0) return;
  grad_sum_squares_kernel<<<grid_for(count, max_n), 256, 0, stream_of(c)>>>(static_cast<const ParamSlot*>(table), out);
  BRAID_LAUNCH_CHECK("grad_sum_squares_kernel");
}

void grad_scale(const Ctx& c, const void* table, int count, int64_t max_n, double k) {
  if (count == 0) return;
  grad_scale_kernel<<<grid_for(count, max_n), 256, 0, stream_of(c)>>>(static_cast<const ParamSlot*>(table),
                                                                     static_cast<float>(k));
  BRAID_LAUNCH_CHECK("grad_scale_kernel");
}

}  // namespace braid::cuda
