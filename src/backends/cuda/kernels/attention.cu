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

// Rotary embeddings (rope_theta > 0) on the first `heads` heads of dh features of each of `rows` qkv rows of ld
// elements (the q heads, then the k heads), position = row % t: forward x' = R x, inverse dx = R^T dx'. The angle
// p * theta^(-2i/dh) and its cos/sin in double, rounded to float; the products rounded one by one (no FMA), as
// the CPU's rope_rotate in ops/defs/attention.cpp.
template <typename T>
__global__ void rope_rows(T* qkv, int64_t rows, int64_t t, int64_t ld, int64_t heads, int64_t dh, double theta,
                          bool inverse) {
  const int64_t half = dh / 2, n = rows * heads * half;
  BRAID_GRID_LOOP(e, n) {
    const int64_t i = e % half, hh = (e / half) % heads, r = e / (half * heads);
    const double a = static_cast<double>(r % t) * pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(dh));
    const float c = static_cast<float>(cos(a)), s = static_cast<float>(sin(a));
    T* x = qkv + r * ld + hh * dh;
    const float u = to_f(x[i]), w = to_f(x[i + half]);
    if (inverse) {
      x[i] = from_f<T>(__fadd_rn(__fmul_rn(u, c), __fmul_rn(w, s)));
      x[i + half] = from_f<T>(__fsub_rn(__fmul_rn(w, c), __fmul_rn(u, s)));
    } else {
      x[i] = from_f<T>(__fsub_rn(__fmul_rn(u, c), __fmul_rn(w, s)));
      x[i + half] = from_f<T>(__fadd_rn(__fmul_rn(w, c), __fmul_rn(u, s)));
    }
  }
}

// Grouped-query attention: the (B T, (h + 2 kv) dh) qkv rows to multi-head rows (B T, 3d), each kv head repeated for
// its h / kv q heads (q head j reads kv head j / (h / kv), Hugging Face's repeat_kv).
template <typename T>
__global__ void expand_kv(const T* src, T* dst, int64_t rows, int64_t h, int64_t kv, int64_t dh) {
  const int64_t d = h * dh, ldf = 3 * d, ldg = (h + 2 * kv) * dh, group = h / kv;
  BRAID_GRID_LOOP(e, rows * ldf) {
    const int64_t r = e / ldf, col = e % ldf, part = col / d, hh = (col % d) / dh, i = col % dh;
    const int64_t from = part == 0 ? hh * dh + i : (part == 1 ? h : h + kv) * dh + (hh / group) * dh + i;
    dst[e] = src[r * ldg + from];
  }
}

// Its transpose for gradients: dq as it is, each kv head's dk and dv the sum of its q heads' in head order (fixed).
template <typename T>
__global__ void reduce_kv(const T* src, T* dst, int64_t rows, int64_t h, int64_t kv, int64_t dh) {
  const int64_t d = h * dh, ldf = 3 * d, ldg = (h + 2 * kv) * dh, group = h / kv;
  BRAID_GRID_LOOP(e, rows * ldg) {
    const int64_t r = e / ldg, col = e % ldg;
    if (col < d) {
      dst[e] = src[r * ldf + col];
    } else {
      const int64_t part = col < (h + kv) * dh ? 1 : 2, rel = col - (part == 1 ? d : d + kv * dh);
      const int64_t g = rel / dh, i = rel % dh;
      float acc = 0.f;
      for (int64_t j = 0; j < group; ++j) acc = __fadd_rn(acc, to_f(src[r * ldf + part * d + (g * group + j) * dh + i]));
      dst[e] = from_f<T>(acc);
    }
  }
}

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

// ---- grouped-query attention and rotary embeddings around the core ------------------------------------------------
// Multi-head attention without rope is the core itself (same bits as before). Otherwise: q and k rotated in place in
// qkv (rope), and with kv < h the rows expanded to multi-head rows in a scratch after the core's workspace, which the
// core (staged or fused) then runs on; the backward expands again, runs the core into a second scratch and sums the
// kv heads' gradients back (reduce_kv), then rotates dq and dk back.
namespace {
size_t expanded_bytes(DType t, int64_t B, int64_t T_, int64_t d) { return round256(static_cast<size_t>(B * T_ * 3 * d) * esize(t)); }
Ctx core_ctx(const Ctx& c, size_t core_bytes) {
  Ctx k = c;
  k.workspace_bytes = std::min(c.workspace_bytes, core_bytes);
  return k;
}
}  // namespace

size_t attention_gqa_forward_workspace(DType t, int64_t B, int64_t T_, int64_t d, int64_t h, int64_t kv) {
  if (kv == h) return attention_forward_workspace(t, T_, h);
  return round256(attention_forward_workspace(t, T_, h)) + expanded_bytes(t, B, T_, d);
}

void attention_gqa_forward(const Ctx& c, DType t, void* qkv, void* context, void* lse, int64_t B, int64_t T_, int64_t d,
                           int64_t h, int64_t kv, double theta, bool causal, double p, uint64_t key, uint64_t mask_base) {
  if (B * T_ == 0) return;
  const int64_t dh = d / h, ld = (h + 2 * kv) * dh;
  if (theta > 0)
    dispatch(t, "attention (rope)", [&](auto tag) {
      using E = decltype(tag);
      rope_rows<E><<<blocks_for(B * T_ * (h + kv) * dh / 2), 256, 0, stream_of(c)>>>(static_cast<E*>(qkv), B * T_, T_, ld,
                                                                                     h + kv, dh, theta, false);
      BRAID_LAUNCH_CHECK("rope_rows");
    });
  if (kv == h) {
    attention_forward(c, t, qkv, context, lse, B, T_, d, h, causal, p, key, mask_base);
    return;
  }
  check_workspace(c, attention_gqa_forward_workspace(t, B, T_, d, h, kv), "attention (kv_heads)");
  const size_t core = round256(attention_forward_workspace(t, T_, h));
  void* full = static_cast<char*>(c.workspace) + core;
  dispatch(t, "attention (kv_heads)", [&](auto tag) {
    using E = decltype(tag);
    expand_kv<E><<<blocks_for(B * T_ * 3 * d), 256, 0, stream_of(c)>>>(static_cast<const E*>(qkv), static_cast<E*>(full),
                                                                       B * T_, h, kv, dh);
    BRAID_LAUNCH_CHECK("expand_kv");
  });
  attention_forward(core_ctx(c, core), t, full, context, lse, B, T_, d, h, causal, p, key, mask_base);
}

size_t attention_gqa_backward_workspace(DType t, int64_t B, int64_t T_, int64_t d, int64_t h, int64_t kv) {
  if (kv == h) return attention_backward_workspace(t, B, T_, h);
  return round256(attention_backward_workspace(t, B, T_, h)) + 2 * expanded_bytes(t, B, T_, d);
}

void attention_gqa_backward(const Ctx& c, DType t, const void* dcontext, const void* qkv, const void* context,
                            const void* lse, void* dqkv, int64_t B, int64_t T_, int64_t d, int64_t h, int64_t kv,
                            double theta, bool causal, double p, uint64_t key, uint64_t mask_base) {
  if (B * T_ == 0) return;
  const int64_t dh = d / h, ld = (h + 2 * kv) * dh;
  if (kv == h) {
    attention_backward(c, t, dcontext, qkv, context, lse, dqkv, B, T_, d, h, causal, p, key, mask_base);
  } else {
    check_workspace(c, attention_gqa_backward_workspace(t, B, T_, d, h, kv), "attention_grad (kv_heads)");
    const size_t core = round256(attention_backward_workspace(t, B, T_, h));
    void* full = static_cast<char*>(c.workspace) + core;
    void* dfull = static_cast<char*>(full) + expanded_bytes(t, B, T_, d);
    dispatch(t, "attention_grad (kv_heads)", [&](auto tag) {
      using E = decltype(tag);
      expand_kv<E><<<blocks_for(B * T_ * 3 * d), 256, 0, stream_of(c)>>>(static_cast<const E*>(qkv), static_cast<E*>(full),
                                                                         B * T_, h, kv, dh);
      BRAID_LAUNCH_CHECK("expand_kv");
    });
    attention_backward(core_ctx(c, core), t, dcontext, full, context, lse, dfull, B, T_, d, h, causal, p, key, mask_base);
    dispatch(t, "attention_grad (kv_heads)", [&](auto tag) {
      using E = decltype(tag);
      reduce_kv<E><<<blocks_for(B * T_ * ld), 256, 0, stream_of(c)>>>(static_cast<const E*>(dfull), static_cast<E*>(dqkv),
                                                                      B * T_, h, kv, dh);
      BRAID_LAUNCH_CHECK("reduce_kv");
    });
  }
  if (theta > 0)
    dispatch(t, "attention_grad (rope)", [&](auto tag) {
      using E = decltype(tag);
      rope_rows<E><<<blocks_for(B * T_ * (h + kv) * dh / 2), 256, 0, stream_of(c)>>>(static_cast<E*>(dqkv), B * T_, T_, ld,
                                                                                     h + kv, dh, theta, true);
      BRAID_LAUNCH_CHECK("rope_rows");
    });
}

}  // namespace braid::cuda
