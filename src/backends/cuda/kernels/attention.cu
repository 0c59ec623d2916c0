// The attention core of ops/defs/attention.cpp on GPU, with the op's flash-style contract (the forward keeps
// only each score row's log-sum-exp for backward). Per sample, in a workspace plane (h, T, T): the scores of
// all heads by one strided batched GEMM (q k^T scaled by 1/sqrt(dh), as the CPU), a row kernel for the causal
// mask, softmax, lse and dropout (core/rng.h's hash: the CPU's mask bit for bit), then the dropped
// probabilities times v by another batched GEMM. The backward recomputes the probabilities from the scores and
// lse, then follows the CPU's formulas (ops/defs/attention.cpp, backward_pair) with two planes. This staged path
// runs fp32 (and bf16-valued) graphs and head dims the fused kernels lack; autocast runs take the fused (flash)
// kernels of flash_attention.cu, which never write a (T, T) plane.
#include <algorithm>
#include <cmath>

#include "backends/cuda/kernels/device_util.cuh"

namespace braid::cuda {
namespace {

// One row i of one (sample, head) plane per block: mask, softmax, lse, dropout; the row ends as the dropped
// probabilities (zeros beyond the causal limit), with a 16-bit copy for autocast GEMMs when p16 is set.
template <typename T>
__global__ void softmax_lse_dropout(T* s, float* lse, int64_t t, bool causal, double p, uint64_t key,
                                    uint64_t plane_base, float keep_scale, void* p16, bool half) {
  int64_t row = blockIdx.x;  // over h * t rows of the sample
  int64_t i = row % t;
  int64_t valid = causal ? i + 1 : t;
  T* r = s + row * t;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < valid; j += blockDim.x) mx = fmaxf(mx, to_f(r[j]));
  mx = block_max(mx);
  double sum = 0;
  for (int64_t j = threadIdx.x; j < valid; j += blockDim.x) sum += expf(to_f(r[j]) - mx);
  float total = static_cast<float>(block_sum(sum));
  float inv = 1.f / total;
  if (threadIdx.x == 0) lse[row] = mx + logf(total);
  for (int64_t j = threadIdx.x; j < t; j += blockDim.x) {
    float v = j < valid ? __fmul_rn(expf(to_f(r[j]) - mx), inv) : 0.f;
    if (p > 0 && j < valid)
      v = uniform_at(key, plane_base + static_cast<uint64_t>(row * t + j)) >= p ? __fmul_rn(v, keep_scale) : 0.f;
    r[j] = from_f<T>(v);
    if (p16) store_autocast(p16, row * t + j, to_f(from_f<T>(v)), half);
  }
}

// Backward, first row pass: P = exp(s - lse) in place (zeros beyond the causal limit); with dropout the dropped
// probabilities P Z into z; a 16-bit copy of what dV's GEMM reads (P Z, or P) into p16 when set.
template <typename T>
__global__ void probs_again(T* s, T* z, const float* lse, int64_t t, bool causal, double p, uint64_t key,
                            uint64_t plane_base, float keep_scale, void* p16, bool half) {
  int64_t row = blockIdx.x, i = row % t, valid = causal ? i + 1 : t;
  T* r = s + row * t;
  const float l = lse[row];
  for (int64_t j = threadIdx.x; j < t; j += blockDim.x) {
    float v = j < valid ? expf(to_f(r[j]) - l) : 0.f;
    r[j] = from_f<T>(v);
    float dv = to_f(from_f<T>(v));
    if (p > 0) {
      dv = j < valid && uniform_at(key, plane_base + static_cast<uint64_t>(row * t + j)) >= p ? __fmul_rn(dv, keep_scale)
                                                                                            : 0.f;
      z[row * t + j] = from_f<T>(dv);
    }
    if (p16) store_autocast(p16, row * t + j, to_f(from_f<T>(dv)), half);
  }
}

// Backward, second row pass: D = rowsum(dO * O) over the head's dh features, then dS = P (Z dPd - D) in place
// of dPd (g); a 16-bit copy into g16 when set.
template <typename T>
__global__ void softmax_backward_rows(T* g, const T* probs, const T* dc, const T* o, int64_t t, int64_t d, int64_t dh,
                                      bool causal, double p, uint64_t key, uint64_t plane_base, float keep_scale,
                                      void* g16, bool half) {
  int64_t row = blockIdx.x, hh = row / t, i = row % t, valid = causal ? i + 1 : t;
  T* gr = g + row * t;
  const T* pr = probs + row * t;
  const T* dcr = dc + i * d + hh * dh;
  const T* orow = o + i * d + hh * dh;
  double dot = 0;
  for (int64_t e = threadIdx.x; e < dh; e += blockDim.x) dot += static_cast<double>(to_f(dcr[e])) * to_f(orow[e]);
  float dd = static_cast<float>(block_sum(dot));
  for (int64_t j = threadIdx.x; j < t; j += blockDim.x) {
    float v = 0.f;
    if (j < valid) {
      v = to_f(gr[j]);
      if (p > 0)
        v = uniform_at(key, plane_base + static_cast<uint64_t>(row * t + j)) >= p ? __fmul_rn(v, keep_scale) : 0.f;
      v = to_f(pr[j]) * (v - dd);
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

void check_workspace(const Ctx& c, size_t need, const char* what) {
  if (c.workspace_bytes < need)
    throw InternalError(std::string(what) + ": CUDA workspace of " + std::to_string(c.workspace_bytes) +
                        " bytes, needs " + std::to_string(need));
}

}  // namespace

size_t attention_forward_workspace(DType t, int64_t T_, int64_t h) { return static_cast<size_t>(h * T_ * T_) * esize(t); }

void attention_forward(const Ctx& c, DType t, const void* qkv, void* context, void* lse, int64_t B, int64_t T_,
                       int64_t d, int64_t h, bool causal, double p, uint64_t key, uint64_t mask_base) {
  if (B * T_ == 0) return;
  if (flash_attention_supported(c, t, B, d / h)) {
    flash_attention_forward(c, t, qkv, context, lse, B, T_, d, h, causal, p, key, mask_base);
    return;
  }
  check_workspace(c, attention_forward_workspace(t, T_, h), "attention");
  const int64_t dh = d / h, ld = 3 * d, plane = T_ * T_;
  const float scale = 1.f / sqrtf(static_cast<float>(dh)), keep_scale = static_cast<float>(1.0 / (1.0 - p));
  const size_t es = esize(t);
  const size_t qkv16_bytes = round256(static_cast<size_t>(T_ * ld) * 2);
  const bool own = own_bf16(c, t, qkv16_bytes + static_cast<size_t>(h * plane) * 2);
  bf16* qkv16 = own ? static_cast<bf16*>(c.autocast) : nullptr;
  bf16* p16 = own ? reinterpret_cast<bf16*>(static_cast<char*>(c.autocast) + qkv16_bytes) : nullptr;
  void* pb = c.workspace;
  for (int64_t b = 0; b < B; ++b) {
    const char* q = static_cast<const char*>(qkv) + static_cast<size_t>(b * T_ * ld) * es;
    const char* k = q + static_cast<size_t>(d) * es;
    const char* v = q + static_cast<size_t>(2 * d) * es;
    char* cb = static_cast<char*>(context) + static_cast<size_t>(b * T_ * d) * es;
    float* lb = static_cast<float*>(lse) + b * h * T_;
    // scores[h] (T, T) = scale q_h k_h^T
    if (own) {
      cast(c, DType::f32, q, c.autocast_type, qkv16, T_ * ld);
      gemm_autocast_f32(c, false, true, T_, T_, dh, scale, qkv16, ld, dh, qkv16 + d, ld, dh, 0.f, pb, T_, plane, h);
    } else {
      gemm(c, t, false, true, T_, T_, dh, scale, q, ld, dh, k, ld, dh, 0.f, pb, T_, plane, h);
    }
    dispatch(t, "attention", [&](auto tag) {
      using E = decltype(tag);
      softmax_lse_dropout<E><<<static_cast<unsigned>(h * T_), 128, 0, stream_of(c)>>>(
          static_cast<E*>(pb), lb, T_, causal, p, key, mask_base + static_cast<uint64_t>(b * h * plane), keep_scale, p16,
          c.autocast_type == DType::f16);
      BRAID_LAUNCH_CHECK("softmax_lse_dropout");
    });
    // context_h (T, dh) = (P Z)_h v_h, written at column h dh of context (B, T, d)
    if (own) gemm_autocast_f32(c, false, false, T_, dh, T_, 1.f, p16, T_, plane, qkv16 + 2 * d, ld, dh, 0.f, cb, d, dh, h);
    else gemm(c, t, false, false, T_, dh, T_, 1.f, pb, T_, plane, v, ld, dh, 0.f, cb, d, dh, h);
  }
}

size_t attention_backward_workspace(DType t, int64_t B, int64_t T_, int64_t h) {
  return std::max(2 * static_cast<size_t>(h * T_ * T_) * esize(t), flash_attention_backward_workspace(B, T_, h));
}

void attention_backward(const Ctx& c, DType t, const void* dcontext, const void* qkv, const void* context,
                        const void* lse, void* dqkv, int64_t B, int64_t T_, int64_t d, int64_t h, bool causal, double p,
                        uint64_t key, uint64_t mask_base) {
  if (B * T_ == 0) return;
  if (flash_attention_supported(c, t, B, d / h)) {
    flash_attention_backward(c, t, dcontext, qkv, context, lse, dqkv, B, T_, d, h, causal, p, key, mask_base);
    return;
  }
  check_workspace(c, attention_backward_workspace(t, B, T_, h), "attention_grad");
  const int64_t dh = d / h, ld = 3 * d, plane = T_ * T_;
  const float scale = 1.f / sqrtf(static_cast<float>(dh)), keep_scale = static_cast<float>(1.0 / (1.0 - p));
  const size_t es = esize(t);
  // Planes: P (recomputed probabilities), G (P Z for dV, then dPd, then dS).
  void* pp = c.workspace;
  void* g = static_cast<char*>(c.workspace) + static_cast<size_t>(h * plane) * es;
  // Own bf16 copies: [qkv | dcontext | one (h, T, T) plane: what dV reads, then dS].
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
    const char* ob = static_cast<const char*>(context) + static_cast<size_t>(b * T_ * d) * es;
    const float* lb = static_cast<const float*>(lse) + b * h * T_;
    const uint64_t pbase = mask_base + static_cast<uint64_t>(b * h * plane);
    // S = scale Q K^T, then P (and P Z)
    if (own) {
      cast(c, DType::f32, q, c.autocast_type, qkv16, T_ * ld);
      cast(c, DType::f32, dc, c.autocast_type, dc16, T_ * d);
      gemm_autocast_f32(c, false, true, T_, T_, dh, scale, qkv16, ld, dh, qkv16 + d, ld, dh, 0.f, pp, T_, plane, h);
    } else {
      gemm(c, t, false, true, T_, T_, dh, scale, q, ld, dh, k, ld, dh, 0.f, pp, T_, plane, h);
    }
    dispatch(t, "attention_grad", [&](auto tag) {
      using E = decltype(tag);
      probs_again<E><<<static_cast<unsigned>(h * T_), 128, 0, stream_of(c)>>>(
          static_cast<E*>(pp), static_cast<E*>(g), lb, T_, causal, p, key, pbase, keep_scale, pl16,
          c.autocast_type == DType::f16);
      BRAID_LAUNCH_CHECK("probs_again");
    });
    // dV = (P Z)^T dC;  dPd = dC V^T
    if (own) {
      gemm_autocast_f32(c, true, false, T_, dh, T_, 1.f, pl16, T_, plane, dc16, d, dh, 0.f, dv, ld, dh, h);
      gemm_autocast_f32(c, false, true, T_, T_, dh, 1.f, dc16, d, dh, qkv16 + 2 * d, ld, dh, 0.f, g, T_, plane, h);
    } else {
      gemm(c, t, true, false, T_, dh, T_, 1.f, p > 0 ? g : pp, T_, plane, dc, d, dh, 0.f, dv, ld, dh, h);
      gemm(c, t, false, true, T_, T_, dh, 1.f, dc, d, dh, v, ld, dh, 0.f, g, T_, plane, h);
    }
    dispatch(t, "attention_grad", [&](auto tag) {
      using E = decltype(tag);
      softmax_backward_rows<E><<<static_cast<unsigned>(h * T_), 128, 0, stream_of(c)>>>(
          static_cast<E*>(g), static_cast<const E*>(pp), reinterpret_cast<const E*>(dc), reinterpret_cast<const E*>(ob),
          T_, d, dh, causal, p, key, pbase, keep_scale, pl16, c.autocast_type == DType::f16);
      // own: dS in 16 bits over the copy dV read (stream order)
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
