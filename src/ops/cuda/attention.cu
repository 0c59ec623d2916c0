// The attention core of ops/defs/attention.cpp on GPU: per sample, the scores of all heads by one strided
// batched GEMM into the probs output (q k^T scaled by 1/sqrt(dh), as the CPU), a row kernel for the causal
// mask, softmax and dropout (core/rng.h's hash: the CPU's mask bit for bit), then probs v by another batched
// GEMM. The backward follows the CPU's formulas with one (h, T, T) scratch per sample. The op's contract
// saves the full probabilities for backward, so this is not a flash-style kernel (docs/gpu.md).
#include <cmath>

#include "ops/cuda/device_util.cuh"

namespace braid::cuda {
namespace {

// One row i of one (sample, head) plane per block: mask, softmax, dropout.
template <typename T>
__global__ void softmax_mask_dropout(T* probs, T* dropped, int64_t t, bool causal, double p, uint64_t key,
                                     uint64_t plane_base, float keep_scale, void* pv16, bool half) {
  int64_t row = blockIdx.x;  // over planes * t rows of the sample
  int64_t i = row % t;
  int64_t valid = causal ? i + 1 : t;
  T* r = probs + row * t;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < valid; j += blockDim.x) mx = fmaxf(mx, to_f(r[j]));
  mx = block_max(mx);
  double s = 0;
  for (int64_t j = threadIdx.x; j < valid; j += blockDim.x) s += expf(to_f(r[j]) - mx);
  float inv = 1.f / static_cast<float>(block_sum(s));
  for (int64_t j = threadIdx.x; j < t; j += blockDim.x) {
    float v = j < valid ? __fmul_rn(expf(to_f(r[j]) - mx), inv) : 0.f;
    r[j] = from_f<T>(v);
    float dv = v;
    if (dropped) {
      if (p > 0 && j < valid)
        dv = uniform_at(key, plane_base + static_cast<uint64_t>(row * t + j)) >= p ? __fmul_rn(v, keep_scale) : 0.f;
      dropped[row * t + j] = from_f<T>(dv);
    }
    if (pv16) store_autocast(pv16, row * t + j, to_f(from_f<T>(dv)), half);
  }
}

// dS = P * (dP - rowsum(dP * P)) with dP = dD (* mask); in place on the scratch rows.
template <typename T>
__global__ void softmax_backward_rows(T* g, const T* probs, const T* dropped, int64_t t, bool causal, double p,
                                      float keep_scale, void* g16, bool half) {
  int64_t row = blockIdx.x, i = row % t, valid = causal ? i + 1 : t;
  T* gr = g + row * t;
  const T* pr = probs + row * t;
  const T* dr = dropped ? dropped + row * t : nullptr;
  double dot = 0;
  for (int64_t j = threadIdx.x; j < valid; j += blockDim.x) {
    float v = to_f(gr[j]);
    if (dr && p > 0) v = to_f(dr[j]) != 0.f ? __fmul_rn(v, keep_scale) : 0.f;
    dot += static_cast<double>(v) * to_f(pr[j]);
  }
  float d = static_cast<float>(block_sum(dot));
  for (int64_t j = threadIdx.x; j < t; j += blockDim.x) {
    float v = 0.f;
    if (j < valid) {
      v = to_f(gr[j]);
      if (dr && p > 0) v = to_f(dr[j]) != 0.f ? __fmul_rn(v, keep_scale) : 0.f;
      v = to_f(pr[j]) * (v - d);
    }
    gr[j] = from_f<T>(v);
    if (g16) store_autocast(g16, row * t + j, to_f(from_f<T>(v)), half);
  }
}

size_t esize(DType t) { return t == DType::f32 ? 4 : 2; }

size_t round256(size_t n) { return (n + 255) / 256 * 256; }

// Autocast with room for this per-sample layout in the scratch: the attention core keeps its own 16-bit copies
// (Ctx::autocast_type: qkv and dcontext cast once per sample, probabilities and dS written in 16 bits by the row
// kernels) instead of every GEMM casting its operand spans again. The values are the ones the staged path would
// cast. (The bf16* pointers below address 2-byte elements of either type: only their size is used.)
bool own_bf16(const Ctx& c, DType t, size_t need) { return t == DType::f32 && c.autocast && c.autocast_bytes >= need; }

}  // namespace

void attention_forward(const Ctx& c, DType t, const void* qkv, void* probs, void* dropped, void* context, int64_t B,
                       int64_t T_, int64_t d, int64_t h, bool causal, double p, uint64_t key, uint64_t mask_base) {
  if (B * T_ == 0) return;
  const int64_t dh = d / h, ld = 3 * d, plane = T_ * T_;
  const float scale = 1.f / sqrtf(static_cast<float>(dh)), keep_scale = static_cast<float>(1.0 / (1.0 - p));
  const size_t es = esize(t);
  const size_t qkv16_bytes = round256(static_cast<size_t>(T_ * ld) * 2);
  const bool own = own_bf16(c, t, qkv16_bytes + static_cast<size_t>(h * plane) * 2);
  bf16* qkv16 = own ? static_cast<bf16*>(c.autocast) : nullptr;
  bf16* p16 = own ? reinterpret_cast<bf16*>(static_cast<char*>(c.autocast) + qkv16_bytes) : nullptr;
  for (int64_t b = 0; b < B; ++b) {
    const char* q = static_cast<const char*>(qkv) + static_cast<size_t>(b * T_ * ld) * es;
    const char* k = q + static_cast<size_t>(d) * es;
    const char* v = q + static_cast<size_t>(2 * d) * es;
    char* pb = static_cast<char*>(probs) + static_cast<size_t>(b * h * plane) * es;
    char* db = dropped ? static_cast<char*>(dropped) + static_cast<size_t>(b * h * plane) * es : nullptr;
    char* cb = static_cast<char*>(context) + static_cast<size_t>(b * T_ * d) * es;
    // scores[h] (T, T) = scale q_h k_h^T
    if (own) {
      cast(c, DType::f32, q, c.autocast_type, qkv16, T_ * ld);
      gemm_autocast_f32(c, false, true, T_, T_, dh, scale, qkv16, ld, dh, qkv16 + d, ld, dh, 0.f, pb, T_, plane, h);
    } else {
      gemm(c, t, false, true, T_, T_, dh, scale, q, ld, dh, k, ld, dh, 0.f, pb, T_, plane, h);
    }
    dispatch(t, "attention", [&](auto tag) {
      using E = decltype(tag);
      softmax_mask_dropout<E><<<static_cast<unsigned>(h * T_), 128, 0, stream_of(c)>>>(
          reinterpret_cast<E*>(pb), reinterpret_cast<E*>(db), T_, causal, p, key,
          mask_base + static_cast<uint64_t>(b * h * plane), keep_scale, p16, c.autocast_type == DType::f16);
      BRAID_LAUNCH_CHECK("softmax_mask_dropout");
    });
    // context_h (T, dh) = P_h v_h, written at column h dh of context (B, T, d)
    if (own) gemm_autocast_f32(c, false, false, T_, dh, T_, 1.f, p16, T_, plane, qkv16 + 2 * d, ld, dh, 0.f, cb, d, dh, h);
    else gemm(c, t, false, false, T_, dh, T_, 1.f, db ? db : pb, T_, plane, v, ld, dh, 0.f, cb, d, dh, h);
  }
}

size_t attention_backward_workspace(DType t, int64_t T_, int64_t h) {
  return static_cast<size_t>(h * T_ * T_) * (t == DType::f32 ? 4 : 2);
}

void attention_backward(const Ctx& c, DType t, const void* dcontext, const void* qkv, const void* probs,
                        const void* dropped, void* dqkv, int64_t B, int64_t T_, int64_t d, int64_t h, bool causal,
                        double p) {
  if (B * T_ == 0) return;
  if (c.workspace_bytes < attention_backward_workspace(t, T_, h))
    throw InternalError("attention_grad: CUDA workspace of " + std::to_string(c.workspace_bytes) + " bytes, needs " +
                        std::to_string(attention_backward_workspace(t, T_, h)));
  const int64_t dh = d / h, ld = 3 * d, plane = T_ * T_;
  const float scale = 1.f / sqrtf(static_cast<float>(dh)), keep_scale = static_cast<float>(1.0 / (1.0 - p));
  const size_t es = esize(t);
  void* g = c.workspace;
  // Own bf16 copies: [qkv | dcontext | one (h, T, T) plane: the probabilities for dV, then dS].
  const size_t qkv16_bytes = round256(static_cast<size_t>(T_ * ld) * 2), dc16_bytes = round256(static_cast<size_t>(T_ * d) * 2);
  const bool own = own_bf16(c, t, qkv16_bytes + dc16_bytes + static_cast<size_t>(h * plane) * 2);
  bf16* qkv16 = own ? static_cast<bf16*>(c.autocast) : nullptr;
  bf16* dc16 = own ? reinterpret_cast<bf16*>(static_cast<char*>(c.autocast) + qkv16_bytes) : nullptr;
  bf16* pl16 = own ? reinterpret_cast<bf16*>(static_cast<char*>(c.autocast) + qkv16_bytes + dc16_bytes) : nullptr;
  for (int64_t b = 0; b < B; ++b) {
    const char* q = static_cast<const char*>(qkv) + static_cast<size_t>(b * T_ * ld) * es;
    const char* k = q + static_cast<size_t>(d) * es;
    const char* v = q + static_cast<size_t>(2 * d) * es;
    char* dq = static_cast<char*>(dqkv) + static_cast<size_t>(b * T_ * ld) * es;
    char* dk = dq + static_cast<size_t>(d) * es;
    char* dv = dq + static_cast<size_t>(2 * d) * es;
    const char* dc = static_cast<const char*>(dcontext) + static_cast<size_t>(b * T_ * d) * es;
    const char* pb = static_cast<const char*>(probs) + static_cast<size_t>(b * h * plane) * es;
    const char* db = dropped ? static_cast<const char*>(dropped) + static_cast<size_t>(b * h * plane) * es : nullptr;
    if (own) {
      cast(c, DType::f32, q, c.autocast_type, qkv16, T_ * ld);
      cast(c, DType::f32, dc, c.autocast_type, dc16, T_ * d);
      cast(c, DType::f32, db ? db : pb, c.autocast_type, pl16, h * plane);
      // dV = D^T dC;  dD = dC V^T
      gemm_autocast_f32(c, true, false, T_, dh, T_, 1.f, pl16, T_, plane, dc16, d, dh, 0.f, dv, ld, dh, h);
      gemm_autocast_f32(c, false, true, T_, T_, dh, 1.f, dc16, d, dh, qkv16 + 2 * d, ld, dh, 0.f, g, T_, plane, h);
    } else {
      // dV = D^T dC
      gemm(c, t, true, false, T_, dh, T_, 1.f, db ? db : pb, T_, plane, dc, d, dh, 0.f, dv, ld, dh, h);
      // dD = dC V^T
      gemm(c, t, false, true, T_, T_, dh, 1.f, dc, d, dh, v, ld, dh, 0.f, g, T_, plane, h);
    }
    dispatch(t, "attention_grad", [&](auto tag) {
      using E = decltype(tag);
      softmax_backward_rows<E><<<static_cast<unsigned>(h * T_), 128, 0, stream_of(c)>>>(
          static_cast<E*>(g), reinterpret_cast<const E*>(pb), reinterpret_cast<const E*>(db), T_, causal, p,
          keep_scale, pl16, c.autocast_type == DType::f16);  // own: dS in 16 bits over the probabilities' copy
                                                              // (dV has read it: stream order)
      BRAID_LAUNCH_CHECK("softmax_backward_rows");
    });
    // dQ = s dS K;  dK = s dS^T Q
    if (own) {
      gemm_autocast_f32(c, false, false, T_, dh, T_, scale, pl16, T_, plane, qkv16 + d, ld, dh, 0.f, dq, ld, dh, h);
      gemm_autocast_f32(c, true, false, T_, dh, T_, scale, pl16, T_, plane, qkv16, ld, dh, 0.f, dk, ld, dh, h);
    } else {
      gemm(c, t, false, false, T_, dh, T_, scale, g, T_, plane, k, ld, dh, 0.f, dq, ld, dh, h);
      gemm(c, t, true, false, T_, dh, T_, scale, g, T_, plane, q, ld, dh, 0.f, dk, ld, dh, h);
    }
  }
}

}  // namespace braid::cuda
