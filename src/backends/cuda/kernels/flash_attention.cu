// Fused (flash-style) attention core for autocast runs (fp32 values, 16-bit GEMM operands): tiles of 64 query
// rows and 64 keys in shared memory, the products on tensor cores through WMMA (bf16 or fp16 operands, fp32
// accumulation), the softmax online (running max and sum per row), so no (T, T) plane ever reaches device
// memory. Same contract as attention.cu's staged path (ops/defs/attention.cpp): the forward writes the context
// and each row's log-sum-exp; the backward recomputes the probabilities from them and the dropout mask from
// the forward's key (core/rng.h's hash: the CPU's mask bit for bit).
//
// Deterministic (no atomics): the backward is two kernels, one per key tile (dK, dV: loops over the query
// tiles that see it) and one per query tile (dQ: loops over its key tiles), each recomputing the tile's
// probabilities; D = rowsum(dO * O) comes first (one warp per row).
//
// Layout per block: 4 warps, each owning 16 rows of the 64-row tile, so every product a warp needs reads its own
// rows and the shared tiles; the elementwise steps (scale, mask, exp, dropout) run on the warp's rows in
// shared memory a row at a time, the lanes over its columns (consecutive addresses: no bank conflicts), row
// maxima and sums by warp shuffles. Head dims 32, 64 and 128 (other dims take the staged path:
// flash_attention_supported).
#include <mma.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <initializer_list>
#include <mutex>
#include <type_traits>
#include <set>
#include <utility>

#include "backends/cuda/kernels/device_util.cuh"

namespace braid::cuda {
namespace {

namespace wm = nvcuda::wmma;

constexpr int kTile = 64;    // query rows and keys per tile
constexpr int kWarps = 4;    // 16 rows each
constexpr int kThreads = kWarps * 32;

// set_flash_attention; BRAID_FLASH_ATTENTION=0 in the environment starts with the staged path (benchmarks compare).
bool flash_default() {
  const char* v = std::getenv("BRAID_FLASH_ATTENTION");
  return !(v && std::string(v) == "0");
}
bool g_flash = flash_default();

template <typename H>
__device__ inline H to_h(float v);
template <>
__device__ inline bf16 to_h<bf16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ inline f16 to_h<f16>(float v) { return __float2half_rn(v); }

// Max and sum over the warp's 32 lanes, every lane getting the result (a fixed shuffle tree: deterministic).
__device__ inline float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ inline float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// dst (64 x DH, 16-bit) <- rows [row0, row0 + 64) of a matrix of values V (f32: rounded to H; H itself: copied)
// with leading dimension ld (zeros past T).
template <typename H, int DH, typename V>
__device__ void load_tile(H* dst, const V* src, int64_t row0, int64_t t, int64_t ld) {
  constexpr int kQuads = kTile * DH / 4;
  for (int idx = threadIdx.x; idx < kQuads; idx += kThreads) {
    int r = idx / (DH / 4), c = (idx % (DH / 4)) * 4;
    int64_t row = row0 + r;
    H* o = dst + r * DH + c;
    if constexpr (std::is_same<V, float>::value) {
      float4 v = row < t ? *reinterpret_cast<const float4*>(src + row * ld + c) : make_float4(0.f, 0.f, 0.f, 0.f);
      o[0] = to_h<H>(v.x);
      o[1] = to_h<H>(v.y);
      o[2] = to_h<H>(v.z);
      o[3] = to_h<H>(v.w);
    } else {  // 16-bit values (bf16 graphs): four at a time, 8 bytes
      static_assert(std::is_same<V, H>::value, "16-bit values load as the tile's own type");
      uint2 v = row < t ? *reinterpret_cast<const uint2*>(src + row * ld + c) : make_uint2(0u, 0u);
      *reinterpret_cast<uint2*>(o) = v;
    }
  }
}

template <typename H>
using FragA = wm::fragment<wm::matrix_a, 16, 16, 16, H, wm::row_major>;
template <typename H>
using FragAt = wm::fragment<wm::matrix_a, 16, 16, 16, H, wm::col_major>;
template <typename H>
using FragB = wm::fragment<wm::matrix_b, 16, 16, 16, H, wm::row_major>;
template <typename H>
using FragBt = wm::fragment<wm::matrix_b, 16, 16, 16, H, wm::col_major>;
using FragC = wm::fragment<wm::accumulator, 16, 16, 16, float>;

// out (16 x 64, f32, ldm 64) = A (16 x DH rows of a, ldm DH) B^T, B the 64 x DH tile b (ldm DH).
template <typename H, int DH>
__device__ void rows_times_tile_t(const H* a, const H* b, float* out) {
#pragma unroll
  for (int n = 0; n < kTile / 16; ++n) {
    FragC acc;
    wm::fill_fragment(acc, 0.f);
#pragma unroll
    for (int k = 0; k < DH / 16; ++k) {
      FragA<H> fa;
      FragBt<H> fb;
      wm::load_matrix_sync(fa, a + k * 16, DH);
      wm::load_matrix_sync(fb, b + n * 16 * DH + k * 16, DH);
      wm::mma_sync(acc, fa, fb, acc);
    }
    wm::store_matrix_sync(out + n * 16, acc, kTile, wm::mem_row_major);
  }
}

// acc[n] (16 x 16 column block n of a 16 x DH product) += A (16 x 64, ldm 64) B (the 64 x DH tile b, ldm DH).
template <typename H, int DH>
__device__ void accumulate_rows_times_tile(FragC (&acc)[DH / 16], const H* a, const H* b) {
#pragma unroll
  for (int k = 0; k < kTile / 16; ++k) {
    FragA<H> fa;
    wm::load_matrix_sync(fa, a + k * 16, kTile);
#pragma unroll
    for (int n = 0; n < DH / 16; ++n) {
      FragB<H> fb;
      wm::load_matrix_sync(fb, b + k * 16 * DH + n * 16, DH);
      wm::mma_sync(acc[n], fa, fb, acc[n]);
    }
  }
}

__device__ inline bool kept(uint64_t key, uint64_t plane_base, int64_t t, int64_t i, int64_t j, double p) {
  return uniform_at(key, plane_base + static_cast<uint64_t>(i * t + j)) >= p;
}

struct Shape4 {
  int64_t t, d, h;
  bool causal;
  double p;
  float scale, keep_scale;
  uint64_t key, mask_base;
};

// ---- forward: one block per (query tile, head, sample) ---------------------------------------------------------
template <int DH>
constexpr size_t fwd_smem() {
  constexpr int f = 16 * (DH > kTile ? DH : kTile);  // per warp: scores, then the P V product
  return 3 * kTile * DH * 2 + kWarps * (f * 4 + 16 * kTile * 2 + 16 * DH * 4);
}

template <typename H, int DH, typename V>
__global__ void __launch_bounds__(kThreads) flash_fwd(const V* qkv, V* context, float* lse, Shape4 s) {
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int kF = 16 * (DH > kTile ? DH : kTile);
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t n_tiles = (s.t + kTile - 1) / kTile;
  const int64_t it = n_tiles - 1 - blockIdx.x;  // the longest causal rows first
  const int64_t hh = blockIdx.y, b = blockIdx.z, i0 = it * kTile, ld = 3 * s.d;
  H* sq = reinterpret_cast<H*>(smem);
  H* sk = sq + kTile * DH;
  H* sv = sk + kTile * DH;
  unsigned char* mine = smem + 3 * kTile * DH * 2 + w * (kF * 4 + 16 * kTile * 2 + 16 * DH * 4);
  float* ss = reinterpret_cast<float*>(mine);
  H* sp = reinterpret_cast<H*>(mine + kF * 4);
  float* so = reinterpret_cast<float*>(mine + kF * 4 + 16 * kTile * 2);
  const V* base = qkv + b * s.t * ld + hh * DH;
  const uint64_t plane_base = s.mask_base + static_cast<uint64_t>((b * s.h + hh) * s.t * s.t);

  load_tile<H, DH>(sq, base, i0, s.t, ld);
  for (int x = lane; x < 16 * DH; x += 32) so[x] = 0.f;
  // Row r of the warp's 16 (query i0 + 16 w + r): running max m[r] and sum l[r], the same in every lane. Lanes
  // hold columns: lane and lane + 32 of a score row, lane + 32 k of an output row (no shared-memory bank
  // conflicts; row reductions by warp shuffles in a fixed order).
  float m[16], l[16];
#pragma unroll
  for (int r = 0; r < 16; ++r) m[r] = -INFINITY, l[r] = 0.f;
  const int64_t last = s.causal ? it : n_tiles - 1;
  for (int64_t jt = 0; jt <= last; ++jt) {
    const int64_t j0 = jt * kTile;
    __syncthreads();  // every warp is done with the previous K and V
    load_tile<H, DH>(sk, base + s.d, j0, s.t, ld);
    load_tile<H, DH>(sv, base + 2 * s.d, j0, s.t, ld);
    __syncthreads();
    rows_times_tile_t<H, DH>(sq + w * 16 * DH, sk, ss);
    __syncwarp();
#pragma unroll
    for (int r = 0; r < 16; ++r) {
      const int64_t i = i0 + w * 16 + r;
      float v[2];
#pragma unroll
      for (int k = 0; k < 2; ++k) {  // scale and mask
        const int64_t j = j0 + lane + 32 * k;
        const bool valid = j < s.t && (!s.causal || j <= i);
        v[k] = valid ? ss[r * kTile + lane + 32 * k] * s.scale : -INFINITY;
      }
      const float m_new = fmaxf(m[r], warp_max(fmaxf(v[0], v[1])));
      const float alpha = m_new == -INFINITY ? 1.f : expf(m[r] - m_new);  // m = -inf, m_new finite: 0
      float sum = 0.f;
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const int c = lane + 32 * k;
        float pv = v[k] == -INFINITY ? 0.f : expf(v[k] - m_new);
        sum += pv;  // the softmax's sum is before dropout
        if (s.p > 0 && pv != 0.f) pv = kept(s.key, plane_base, s.t, i, j0 + c, s.p) ? pv * s.keep_scale : 0.f;
        sp[r * kTile + c] = to_h<H>(pv);
      }
      l[r] = l[r] * alpha + warp_sum(sum);
      m[r] = m_new;
      for (int c = lane; c < DH; c += 32) so[r * DH + c] *= alpha;
    }
    __syncwarp();
    // ss <- P V (16 x DH), then O += it
    FragC acc[DH / 16];
#pragma unroll
    for (int n = 0; n < DH / 16; ++n) wm::fill_fragment(acc[n], 0.f);
    accumulate_rows_times_tile<H, DH>(acc, sp, sv);
#pragma unroll
    for (int n = 0; n < DH / 16; ++n) wm::store_matrix_sync(ss + n * 16, acc[n], DH, wm::mem_row_major);
    __syncwarp();
    for (int x = lane; x < 16 * DH; x += 32) so[x] += ss[x];
    __syncwarp();
  }
#pragma unroll
  for (int r = 0; r < 16; ++r) {
    const int64_t i = i0 + w * 16 + r;
    if (i >= s.t) continue;  // the same for every lane
    const float inv = 1.f / l[r];
    V* out = context + (b * s.t + i) * s.d + hh * DH;
    for (int c = lane; c < DH; c += 32) out[c] = from_f<V>(so[r * DH + c] * inv);
    if (lane == 0) lse[(b * s.h + hh) * s.t + i] = m[r] + logf(l[r]);
  }
}

// ---- backward -------------------------------------------------------------------------------------------------
// D[(b h + hh) T + i] = rowsum(dO * O) over the head's DH features: one warp per row, fixed order.
template <typename V>
__global__ void rowsum_do_o(const V* dc, const V* o, float* dsum, int64_t B, int64_t t, int64_t d, int64_t h,
                            int64_t dh) {
  int64_t row = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) >> 5;  // over B h T
  int lane = threadIdx.x & 31;
  if (row >= B * h * t) return;
  int64_t i = row % t, hh = (row / t) % h, b = row / (t * h);
  const V* x = dc + (b * t + i) * d + hh * dh;
  const V* y = o + (b * t + i) * d + hh * dh;
  float v = 0.f;
  for (int64_t e = lane; e < dh; e += 32) v += to_f(x[e]) * to_f(y[e]);
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  if (lane == 0) dsum[row] = v;
}

template <int DH>
constexpr size_t bwd_smem() {
  constexpr int f = 16 * (DH > kTile ? DH : kTile);
  return 4 * kTile * DH * 2 + 2 * kTile * 4 + kWarps * (2 * f * 4 + 2 * 16 * kTile * 2);
}

// dK, dV of one key tile: the warp's 16 keys against every query tile that sees them. Works on the transposed
// scores S^T (keys x queries) so each product uses the warp's own rows: S^T = K_w Q^T, dPd^T = V_w dO^T,
// P^T = exp(s S^T - lse), dS^T = P^T (Z dPd^T - D); dV += (P Z)^T dO, dK += s dS^T Q.
template <typename H, int DH, typename V>
__global__ void __launch_bounds__(kThreads) flash_bwd_dkv(const V* qkv, const V* dc, const float* lse,
                                                          const float* dsum, V* dqkv, Shape4 s) {
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int kF = 16 * (DH > kTile ? DH : kTile);
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t n_tiles = (s.t + kTile - 1) / kTile;
  const int64_t jt = blockIdx.x, hh = blockIdx.y, b = blockIdx.z, j0 = jt * kTile, ld = 3 * s.d;
  H* sk = reinterpret_cast<H*>(smem);
  H* sv = sk + kTile * DH;
  H* sq = sv + kTile * DH;
  H* sdo = sq + kTile * DH;
  float* sl = reinterpret_cast<float*>(sdo + kTile * DH);
  float* sd = sl + kTile;
  unsigned char* mine = reinterpret_cast<unsigned char*>(sd + kTile) + w * (2 * kF * 4 + 2 * 16 * kTile * 2);
  float* ss = reinterpret_cast<float*>(mine);
  float* sg = ss + kF;
  H* spz = reinterpret_cast<H*>(sg + kF);
  H* sds = spz + 16 * kTile;
  const V* base = qkv + b * s.t * ld + hh * DH;
  const V* dcb = dc + b * s.t * s.d + hh * DH;
  const float* lrow = lse + (b * s.h + hh) * s.t;
  const float* drow = dsum + (b * s.h + hh) * s.t;
  const uint64_t plane_base = s.mask_base + static_cast<uint64_t>((b * s.h + hh) * s.t * s.t);

  load_tile<H, DH>(sk, base + s.d, j0, s.t, ld);
  load_tile<H, DH>(sv, base + 2 * s.d, j0, s.t, ld);
  FragC dk[DH / 16], dv[DH / 16];
#pragma unroll
  for (int n = 0; n < DH / 16; ++n) {
    wm::fill_fragment(dk[n], 0.f);
    wm::fill_fragment(dv[n], 0.f);
  }
  for (int64_t it = s.causal ? jt : 0; it < n_tiles; ++it) {
    const int64_t i0 = it * kTile;
    __syncthreads();
    load_tile<H, DH>(sq, base, i0, s.t, ld);
    load_tile<H, DH>(sdo, dcb, i0, s.t, s.d);
    for (int x = threadIdx.x; x < kTile; x += kThreads) {
      int64_t i = i0 + x;
      sl[x] = i < s.t ? lrow[i] : INFINITY;
      sd[x] = i < s.t ? drow[i] : 0.f;
    }
    __syncthreads();
    rows_times_tile_t<H, DH>(sk + w * 16 * DH, sq, ss);
    rows_times_tile_t<H, DH>(sv + w * 16 * DH, sdo, sg);
    __syncwarp();
    // Row r: key j0 + 16 w + r; lanes hold the queries (columns) lane and lane + 32.
    for (int r = 0; r < 16; ++r) {
      const int64_t j = j0 + w * 16 + r;
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const int c = lane + 32 * k;
        const int64_t i = i0 + c;
        const bool valid = i < s.t && j < s.t && (!s.causal || j <= i);
        const float pv = valid ? expf(ss[r * kTile + c] * s.scale - sl[c]) : 0.f;
        float dp = sg[r * kTile + c], pz = pv;
        if (s.p > 0) {
          const bool keep = valid && kept(s.key, plane_base, s.t, i, j, s.p);
          pz = keep ? pv * s.keep_scale : 0.f;
          dp = keep ? dp * s.keep_scale : 0.f;
        }
        spz[r * kTile + c] = to_h<H>(pz);
        sds[r * kTile + c] = to_h<H>(pv * (dp - sd[c]));
      }
    }
    __syncwarp();
    accumulate_rows_times_tile<H, DH>(dv, spz, sdo);
    accumulate_rows_times_tile<H, DH>(dk, sds, sq);
  }
#pragma unroll
  for (int n = 0; n < DH / 16; ++n) {
    wm::store_matrix_sync(ss + n * 16, dk[n], DH, wm::mem_row_major);
    wm::store_matrix_sync(sg + n * 16, dv[n], DH, wm::mem_row_major);
  }
  __syncwarp();
  for (int r = 0; r < 16; ++r) {
    const int64_t j = j0 + w * 16 + r;
    if (j >= s.t) continue;
    V* out = dqkv + (b * s.t + j) * ld + hh * DH;
    for (int c = lane; c < DH; c += 32) {
      out[s.d + c] = from_f<V>(ss[r * DH + c] * s.scale);
      out[2 * s.d + c] = from_f<V>(sg[r * DH + c]);
    }
  }
}

// dQ of one query tile: the warp's 16 rows against the key tiles they see. S = Q_w K^T, dPd = dO_w V^T,
// P = exp(s S - lse), dS = P (Z dPd - D), dQ += s dS K.
template <typename H, int DH, typename V>
__global__ void __launch_bounds__(kThreads) flash_bwd_dq(const V* qkv, const V* dc, const float* lse,
                                                         const float* dsum, V* dqkv, Shape4 s) {
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int kF = 16 * (DH > kTile ? DH : kTile);
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t n_tiles = (s.t + kTile - 1) / kTile;
  const int64_t it = n_tiles - 1 - blockIdx.x, hh = blockIdx.y, b = blockIdx.z, i0 = it * kTile, ld = 3 * s.d;
  H* sq = reinterpret_cast<H*>(smem);
  H* sdo = sq + kTile * DH;
  H* sk = sdo + kTile * DH;
  H* sv = sk + kTile * DH;
  float* sl = reinterpret_cast<float*>(sv + kTile * DH);
  float* sd = sl + kTile;
  unsigned char* mine = reinterpret_cast<unsigned char*>(sd + kTile) + w * (2 * kF * 4 + 2 * 16 * kTile * 2);
  float* ss = reinterpret_cast<float*>(mine);
  float* sg = ss + kF;
  H* sds = reinterpret_cast<H*>(sg + kF);
  const V* base = qkv + b * s.t * ld + hh * DH;
  const uint64_t plane_base = s.mask_base + static_cast<uint64_t>((b * s.h + hh) * s.t * s.t);

  load_tile<H, DH>(sq, base, i0, s.t, ld);
  load_tile<H, DH>(sdo, dc + b * s.t * s.d + hh * DH, i0, s.t, s.d);
  for (int x = threadIdx.x; x < kTile; x += kThreads) {
    int64_t i = i0 + x;
    sl[x] = i < s.t ? lse[(b * s.h + hh) * s.t + i] : INFINITY;
    sd[x] = i < s.t ? dsum[(b * s.h + hh) * s.t + i] : 0.f;
  }
  FragC dq[DH / 16];
#pragma unroll
  for (int n = 0; n < DH / 16; ++n) wm::fill_fragment(dq[n], 0.f);
  const int64_t last = s.causal ? it : n_tiles - 1;
  for (int64_t jt = 0; jt <= last; ++jt) {
    const int64_t j0 = jt * kTile;
    __syncthreads();
    load_tile<H, DH>(sk, base + s.d, j0, s.t, ld);
    load_tile<H, DH>(sv, base + 2 * s.d, j0, s.t, ld);
    __syncthreads();
    rows_times_tile_t<H, DH>(sq + w * 16 * DH, sk, ss);
    rows_times_tile_t<H, DH>(sdo + w * 16 * DH, sv, sg);
    __syncwarp();
    // Row r: query i0 + 16 w + r; lanes hold the keys (columns) lane and lane + 32.
    for (int r = 0; r < 16; ++r) {
      const int64_t i = i0 + w * 16 + r;
      const float lr = sl[w * 16 + r], dr = sd[w * 16 + r];
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const int c = lane + 32 * k;
        const int64_t jj = j0 + c;
        const bool valid = i < s.t && jj < s.t && (!s.causal || jj <= i);
        const float pv = valid ? expf(ss[r * kTile + c] * s.scale - lr) : 0.f;
        float dp = sg[r * kTile + c];
        if (s.p > 0) dp = valid && kept(s.key, plane_base, s.t, i, jj, s.p) ? dp * s.keep_scale : 0.f;
        sds[r * kTile + c] = to_h<H>(pv * (dp - dr));
      }
    }
    __syncwarp();
    accumulate_rows_times_tile<H, DH>(dq, sds, sk);
  }
#pragma unroll
  for (int n = 0; n < DH / 16; ++n) wm::store_matrix_sync(ss + n * 16, dq[n], DH, wm::mem_row_major);
  __syncwarp();
  for (int r = 0; r < 16; ++r) {
    const int64_t i = i0 + w * 16 + r;
    if (i >= s.t) continue;
    V* out = dqkv + (b * s.t + i) * ld + hh * DH;
    for (int c = lane; c < DH; c += 32) out[c] = from_f<V>(ss[r * DH + c] * s.scale);
  }
}

// Launch helpers: the kernel's dynamic shared memory above 48 KiB needs the opt-in, once per kernel and device
// (a driver call, not repeated at every launch of a training step).
template <typename K>
void allow_smem(const Ctx& c, K kernel, size_t bytes) {
  static std::mutex mu;
  static std::set<std::pair<const void*, int>> done;
  std::lock_guard<std::mutex> lock(mu);
  if (!done.emplace(reinterpret_cast<const void*>(kernel), c.device).second) return;
  BRAID_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

Shape4 shape_of(int64_t T_, int64_t d, int64_t h, bool causal, double p, uint64_t key, uint64_t mask_base) {
  Shape4 s;
  s.t = T_;
  s.d = d;
  s.h = h;
  s.causal = causal;
  s.p = p;
  s.scale = 1.f / sqrtf(static_cast<float>(d / h));
  s.keep_scale = static_cast<float>(1.0 / (1.0 - p));
  s.key = key;
  s.mask_base = mask_base;
  return s;
}

template <typename H, int DH, typename V>
void forward_as(const Ctx& c, const V* qkv, V* context, float* lse, int64_t B, const Shape4& s) {
  constexpr size_t smem = fwd_smem<DH>();
  allow_smem(c, flash_fwd<H, DH, V>, smem);
  dim3 grid(static_cast<unsigned>((s.t + kTile - 1) / kTile), static_cast<unsigned>(s.h), static_cast<unsigned>(B));
  flash_fwd<H, DH, V><<<grid, kThreads, smem, stream_of(c)>>>(qkv, context, lse, s);
  BRAID_LAUNCH_CHECK("flash_fwd");
}

template <typename H, int DH, typename V>
void backward_as(const Ctx& c, const V* qkv, const V* dc, const float* lse, const float* dsum, V* dqkv, int64_t B,
                 const Shape4& s) {
  constexpr size_t smem = bwd_smem<DH>();
  allow_smem(c, flash_bwd_dkv<H, DH, V>, smem);
  allow_smem(c, flash_bwd_dq<H, DH, V>, smem);
  dim3 grid(static_cast<unsigned>((s.t + kTile - 1) / kTile), static_cast<unsigned>(s.h), static_cast<unsigned>(B));
  flash_bwd_dkv<H, DH, V><<<grid, kThreads, smem, stream_of(c)>>>(qkv, dc, lse, dsum, dqkv, s);
  BRAID_LAUNCH_CHECK("flash_bwd_dkv");
  flash_bwd_dq<H, DH, V><<<grid, kThreads, smem, stream_of(c)>>>(qkv, dc, lse, dsum, dqkv, s);
  BRAID_LAUNCH_CHECK("flash_bwd_dq");
}

template <typename H, typename V>
void forward_dim(const Ctx& c, int64_t dh, const void* qkv, void* context, float* lse, int64_t B, const Shape4& s) {
  auto q = static_cast<const V*>(qkv);
  auto o = static_cast<V*>(context);
  if (dh == 32) forward_as<H, 32, V>(c, q, o, lse, B, s);
  else if (dh == 64) forward_as<H, 64, V>(c, q, o, lse, B, s);
  else forward_as<H, 128, V>(c, q, o, lse, B, s);
}

template <typename H, typename V>
void backward_dim(const Ctx& c, int64_t dh, const void* qkv, const void* dcontext, const void* context,
                  const float* lse, float* dsum, void* dqkv, int64_t B, const Shape4& s) {
  auto q = static_cast<const V*>(qkv);
  auto dc = static_cast<const V*>(dcontext);
  auto dq = static_cast<V*>(dqkv);
  const int64_t rows = B * s.h * s.t;
  rowsum_do_o<V><<<static_cast<unsigned>((rows * 32 + 255) / 256), 256, 0, stream_of(c)>>>(
      dc, static_cast<const V*>(context), dsum, B, s.t, s.d, s.h, dh);
  BRAID_LAUNCH_CHECK("rowsum_do_o");
  if (dh == 32) backward_as<H, 32, V>(c, q, dc, lse, dsum, dq, B, s);
  else if (dh == 64) backward_as<H, 64, V>(c, q, dc, lse, dsum, dq, B, s);
  else backward_as<H, 128, V>(c, q, dc, lse, dsum, dq, B, s);
}

// The tiles are read as float4: every tensor 16-byte aligned (the memory plan aligns values to 64 bytes).
void check_aligned(std::initializer_list<const void*> tensors) {
  for (const void* p : tensors)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0)
      throw InternalError("flash attention: a tensor is not 16-byte aligned (the memory plan aligns to 64)");
}

}  // namespace

void set_flash_attention(bool on) { g_flash = on; }

// By shape, type and mode only, so that a forward and its backward always take the same path (the backward's
// recomputed probabilities must be normalised by the forward's lse of the same products).
bool flash_attention_supported(const Ctx& c, DType t, int64_t B, int64_t dh) {
  const bool types = (t == DType::f32 && c.autocast != nullptr) || t == DType::bf16;  // autocast, or bf16 values
  return g_flash && types && (dh == 32 || dh == 64 || dh == 128) && B <= 65535;
}

void flash_attention_forward(const Ctx& c, DType t, const void* qkv, void* context, void* lse, int64_t B, int64_t T_,
                             int64_t d, int64_t h, bool causal, double p, uint64_t key, uint64_t mask_base) {
  if (B * T_ == 0) return;
  check_aligned({qkv, context});
  const Shape4 s = shape_of(T_, d, h, causal, p, key, mask_base);
  auto l = static_cast<float*>(lse);
  if (t == DType::bf16) forward_dim<bf16, bf16>(c, d / h, qkv, context, l, B, s);
  else if (c.autocast_type == DType::f16) forward_dim<f16, float>(c, d / h, qkv, context, l, B, s);
  else forward_dim<bf16, float>(c, d / h, qkv, context, l, B, s);
}

size_t flash_attention_backward_workspace(int64_t B, int64_t T_, int64_t h) { return static_cast<size_t>(B * h * T_) * 4; }

void flash_attention_backward(const Ctx& c, DType t, const void* dcontext, const void* qkv, const void* context,
                              const void* lse, void* dqkv, int64_t B, int64_t T_, int64_t d, int64_t h, bool causal,
                              double p, uint64_t key, uint64_t mask_base) {
  if (B * T_ == 0) return;
  check_aligned({dcontext, qkv, context, dqkv});
  if (c.workspace_bytes < flash_attention_backward_workspace(B, T_, h))
    throw InternalError("attention_grad (flash): CUDA workspace of " + std::to_string(c.workspace_bytes) +
                        " bytes, needs " + std::to_string(flash_attention_backward_workspace(B, T_, h)));
  float* dsum = static_cast<float*>(c.workspace);
  const Shape4 s = shape_of(T_, d, h, causal, p, key, mask_base);
  auto l = static_cast<const float*>(lse);
  if (t == DType::bf16) backward_dim<bf16, bf16>(c, d / h, qkv, dcontext, context, l, dsum, dqkv, B, s);
  else if (c.autocast_type == DType::f16) backward_dim<f16, float>(c, d / h, qkv, dcontext, context, l, dsum, dqkv, B, s);
  else backward_dim<bf16, float>(c, d / h, qkv, dcontext, context, l, dsum, dqkv, B, s);
}

}  // namespace braid::cuda
