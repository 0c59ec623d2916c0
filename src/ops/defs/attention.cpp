// Multi-head self-attention, exactly torch.nn.MultiheadAttention(d, heads, dropout, bias, batch_first=True)
// with query = key = value = x: qkv = x W_in^T + b_in ([q; k; v] rows of in_proj_weight), per head
// softmax(q k^T / sqrt(d / heads) (+ causal mask)) -> dropout -> @ v, heads concatenated, then out_proj.
// Grouped-query attention (kv_heads < heads): qkv holds heads q heads then kv_heads k and kv_heads v heads of
// dh = d / heads features each; q head j reads kv head j / (heads / kv_heads) (Hugging Face's repeat_kv).
// Rotary position embeddings (rope_theta > 0): q and k of every head are rotated in place inside qkv right after
// the projection (rotate-half, HF Llama / GPT-NeoX; cos/sin of position p computed in double, then rounded), so the
// saved qkv holds the rotated q and k; the backward rotates dq and dk back (the transposed rotation).
// Saved for backward as extra outputs, flash-attention style (no (B, h, T, T) tensor is kept): qkv, the
// context (pre out_proj) and the log-sum-exp of each score row, lse (B, h, T), in f32 (f64 for f64 graphs).
// The backward recomputes the probabilities of a block of rows as exp(s - lse). Dropout keeps element
// (b, head, i, j) when uniform_at(rng_key, its flat index in the whole micro-batch's (B, h, T, T), i.e. with
// b + KernelCtx::batch_offset) >= p, scaled 1/(1 - p); eval mode has no dropout. The backward draws the same
// mask again: attention_grad's `rng_node` attribute names the forward node, whose random stream the executors
// give it. The gradient reuses linear_dx/dw/db for both projections and adds one internal op, attention_grad
// (context gradient -> qkv gradient). Splits: by samples, and (without dropout) by heads, Megatron's way; a call's
// heads are read from the shapes (out_proj.weight's columns, lse's heads), so a device's share runs the same code.
#include <algorithm>
#include <array>
#include <cmath>
#include <sstream>

#include "core/cpu_isa.h"
#include "core/parallel.h"
#include "core/rng.h"
#include "ops/cpu/fast_math.h"
#include "ops/cpu/kernel_util.h"
#include "ops/registry.h"

namespace braid::ops {
namespace {

using cpu::dispatch_float;

std::string str(int64_t v) { return std::to_string(v); }

constexpr int64_t kMaxSlots = 32;  // units of work processed concurrently (each with its own scratch)

// Query rows per unit of work: at most 64, and few enough that each per-unit GEMM stays under 2^19
// multiply-adds (never under 8 rows). The bound is measured: on the benchmark GPT (T = 128, dh = 64) 64-row
// blocks ran its attention_grad in 9.0 ms a step, 32-row blocks (2^18) in 9.9 and 128-row blocks (2^20) in
// 10.3-10.5 (docs/benchmarks.md). 2^18 had come from OpenBLAS, which threads GEMMs above it; a unit's GEMMs run
// on its own thread on any library (cpu::gemm inside a parallel region is single-threaded).
int64_t row_block(int64_t t, int64_t dh) {
  return std::min(t, std::clamp<int64_t>((int64_t{1} << 19) / (t * dh), 8, 64));
}

// A row's maximum over 16 lanes (exact in any order; a NaN score ends as NaN probabilities either way).
template <typename T>
T row_max(const T* __restrict x, int64_t n) {
  constexpr int64_t kL = 16;
  T m = x[0];
  if (n >= kL) {
    T lane[kL];
    for (int64_t l = 0; l < kL; ++l) lane[l] = x[l];
    const int64_t body = n / kL * kL;
    for (int64_t j = kL; j < body; j += kL)
      for (int64_t l = 0; l < kL; ++l) lane[l] = x[j + l] > lane[l] ? x[j + l] : lane[l];
    for (int64_t j = body; j < n; ++j) lane[j - body] = x[j] > lane[j - body] ? x[j] : lane[j - body];
    m = lane[0];
    for (int64_t l = 1; l < kL; ++l) m = lane[l] > m ? lane[l] : m;
    return m;
  }
  for (int64_t j = 1; j < n; ++j) m = x[j] > m ? x[j] : m;
  return m;
}

// sum_e a[e] b[e] over the fixed double lanes of cpu::lane_total.
template <typename T>
double row_dot(const T* __restrict a, const T* __restrict b, int64_t n) {
  constexpr int kL = cpu::kSumLanes;
  double acc[kL] = {};
  const int64_t body = n / kL * kL;
  for (int64_t e = 0; e < body; e += kL)
    for (int l = 0; l < kL; ++l) acc[l] += static_cast<double>(a[e + l]) * b[e + l];
  for (int64_t e = body; e < n; ++e) acc[e - body] += static_cast<double>(a[e]) * b[e];
  return cpu::lane_total(acc);
}

// Output indices of attention.
constexpr int kOutY = 0, kOutQkv = 1, kOutContext = 2, kOutLse = 3;

// The log-sum-exp rows are kept in f32 (f64 in f64 graphs): a 16-bit lse would put its rounding (2^-8 of ~10)
// into every recomputed probability.
DType lse_dtype(DType x) { return x == DType::f64 ? DType::f64 : DType::f32; }

// Sizes of one call: batch, sequence, input features, head size, q heads and kv heads of this call (all of them,
// or a device's under the `heads` split); the context is dc() = h dh wide; qkv rows are ld() wide with q head hh
// at q_off(hh), kv head g's k at k_off(g) and v at v_off(g).
struct Dims {
  int64_t b, t, d, dh, h, kvh;
  Dims(int64_t b_, int64_t t_, int64_t d_, int64_t dh_, int64_t h_, int64_t kvh_)
      : b(b_), t(t_), d(d_), dh(dh_), h(h_), kvh(kvh_) {}
  int64_t dc() const { return h * dh; }
  int64_t group() const { return h / kvh; }
  int64_t ld() const { return (h + 2 * kvh) * dh; }
  int64_t q_off(int64_t hh) const { return hh * dh; }
  int64_t k_off(int64_t g) const { return (h + g) * dh; }
  int64_t v_off(int64_t g) const { return (h + kvh + g) * dh; }
};

// The forward's sizes: head_dim = d / heads; under the `heads` split a device's out_proj.weight holds the columns
// of its heads' context features (heads_l dh), which gives its q heads heads_l and kv heads kv_heads heads_l / heads.
// context_features 0 (or not such a share): all heads.
Dims dims_of(const Attrs& a, const Shape& x, int64_t context_features = 0) {
  const int64_t h = a.i("heads"), kvh = a.i("kv_heads"), dh = x[2] / h;
  int64_t hl = h;
  if (context_features > 0 && dh > 0 && context_features % dh == 0) {
    const int64_t c = context_features / dh;
    if (h % c == 0 && kvh % (h / c) == 0) hl = c;
  }
  return Dims(x[0], x[1], x[2], dh, hl, kvh * hl / h);
}
int64_t context_features(const TensorDesc& w_out) { return w_out.shape.rank() == 2 ? w_out.shape[1] : 0; }

// attention_grad's sizes, from its operands: dcontext (B, T, h dh), qkv (B, T, (h + 2 kv) dh), lse (B, h, T).
Dims grad_dims(const Shape& dcontext, const Shape& qkv, const Shape& lse) {
  const int64_t h = lse[1], dh = dcontext[2] / h;
  return Dims(dcontext[0], dcontext[1], dcontext[2], dh, h, (qkv[2] / dh - h) / 2);
}

// ---- rotary position embeddings (rope_theta > 0) ------------------------------------------------------------
// Table of `t` rows of cos then sin of a = p * theta^(-2i / dh), i < dh / 2: computed in double, rounded to T.
template <typename T>
void rope_table(double theta, int64_t t, int64_t dh, T* table) {
  const int64_t half = dh / 2;
  parallel_for(t, 16, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p)
      for (int64_t i = 0; i < half; ++i) {
        const double a = static_cast<double>(p) * std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(dh));
        table[p * dh + i] = static_cast<T>(std::cos(a));
        table[p * dh + half + i] = static_cast<T>(std::sin(a));
      }
  });
}

// Rotates q and k of every head of every qkv row in place: forward x' = R x (inverse = false:
// x'[i] = x[i] c - x[i+h] s, x'[i+h] = x[i+h] c + x[i] s), or backward dx = R^T dx' (inverse = true).
template <typename T>
void rope_rotate(const Dims& n, const T* table, T* qkv, bool inverse) {
  const int64_t half = n.dh / 2, heads = n.h + n.kvh, ld = n.ld();  // q heads then k heads are contiguous
  parallel_for(n.b * n.t, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* c = table + (r % n.t) * n.dh;
      const T* s = c + half;
      for (int64_t hh = 0; hh < heads; ++hh) {
        T* x = qkv + r * ld + hh * n.dh;
        T* y = x + half;
        if (inverse) {
          for (int64_t i = 0; i < half; ++i) {
            const T a = x[i], b = y[i];
            x[i] = a * c[i] + b * s[i];
            y[i] = b * c[i] - a * s[i];
          }
        } else {
          for (int64_t i = 0; i < half; ++i) {
            const T a = x[i], b = y[i];
            x[i] = a * c[i] - b * s[i];
            y[i] = b * c[i] + a * s[i];
          }
        }
      }
    }
  });
}

// Elements of the rope table (0 without rope).
int64_t rope_elems(const Attrs& a, const Dims& n) { return a.f("rope_theta") > 0 ? n.t * n.dh : 0; }

// Input indices: x, in_proj_weight, [in_proj_bias], out_proj.weight, [out_proj.bias].
struct ParamIdx {
  int w_in = 1, b_in = -1, w_out = 2, b_out = -1;
  explicit ParamIdx(bool bias) {
    if (bias) b_in = 2, w_out = 3, b_out = 4;
  }
};

void check_attention(const Attrs& a, const TensorDesc& x) {
  if (x.shape.rank() != 3)
    throw OpError("attention needs x [batch, seq, features], got " + x.str(), "per-sample shape [seq, features]");
  if (!is_float(x.dtype)) throw OpError("attention input must be floating point, got " + x.str());
  int64_t d = x.shape[2], h = a.i("heads"), kvh = a.i("kv_heads");
  if (d % h != 0) {
    std::string divisors;
    for (int64_t k = 1; k <= d && divisors.size() < 60; ++k)
      if (d % k == 0) divisors += (divisors.empty() ? "" : ", ") + str(k);
    throw OpError("heads " + str(h) + " does not divide the features d = " + str(d) + " of input " + x.str(),
                  "heads must divide d; divisors of " + str(d) + ": " + divisors);
  }
  if (h % kvh != 0) {
    std::string divisors;
    for (int64_t k = 1; k <= h; ++k)
      if (h % k == 0) divisors += (divisors.empty() ? "" : ", ") + str(k);
    throw OpError("kv_heads " + str(kvh) + " does not divide heads " + str(h),
                  "each key/value head serves heads / kv_heads query heads; divisors of " + str(h) + ": " + divisors);
  }
  double p = a.f("dropout");
  if (!(p >= 0 && p < 1)) throw OpError("attention dropout must be in [0, 1), got " + std::to_string(p));
  double theta = a.f("rope_theta");
  auto num = [](double v) {
    std::ostringstream o;
    o << v;
    return o.str();
  };
  if (!(theta >= 0) || !std::isfinite(theta))
    throw OpError("attention rope_theta must be 0 (no rotary embedding) or positive, got " + num(theta),
                  "Llama 2 uses 10000, Llama 3 500000");
  if (theta > 0 && (d / h) % 2 != 0)
    throw OpError("rotary embeddings (rope_theta " + num(theta) + ") need an even head size, got d / heads = " +
                      str(d) + " / " + str(h) + " = " + str(d / h),
                  "choose heads so that d / heads is even");
}

// nn.MultiheadAttention's init: xavier_uniform on in_proj_weight (fan_in d, fan_out its rows: 3d without GQA),
// zero biases, out_proj.weight as nn.Linear (uniform(+-1/sqrt(d))).
std::vector<ParamSpec> attention_params(const Attrs& a, std::span<const TensorDesc> in) {
  check_attention(a, in[0]);
  int64_t d = in[0].shape[2], rows = dims_of(a, in[0].shape).ld();
  DType t = master_dtype(in[0].dtype);  // 16-bit inputs: f32 master weights
  double xavier = std::sqrt(6.0 / static_cast<double>(d + rows)), lin = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<ParamSpec> p{{"in_proj_weight", {Shape{rows, d}, t}, InitSpec::uniform(-xavier, xavier)}};
  if (a.b("bias")) p.push_back({"in_proj_bias", {Shape{rows}, t}, InitSpec::zeros()});
  p.push_back({"out_proj.weight", {Shape{d, d}, t}, InitSpec::uniform(-lin, lin)});
  if (a.b("bias")) p.push_back({"out_proj.bias", {Shape{d}, t}, InitSpec::zeros()});
  return p;
}

std::vector<TensorDesc> attention_infer(const Attrs& a, std::span<const TensorDesc> in) {
  const TensorDesc& x = in[0];
  check_attention(a, x);
  bool bias = a.b("bias");
  ParamIdx ix(bias);
  BRAID_ASSERT(in.size() == (bias ? 5u : 3u), "attention takes x and ", bias ? 4 : 2, " parameters");
  const Dims n = dims_of(a, x.shape, context_features(in[static_cast<size_t>(ix.w_out)]));
  int64_t b = n.b, t = n.t, d = n.d, h = n.h, rows = n.ld();
  auto expect = [&](int i, Shape s, const char* name) {
    const DType pt = master_dtype(x.dtype);
    if (in[static_cast<size_t>(i)].shape != s || in[static_cast<size_t>(i)].dtype != pt)
      throw OpError(std::string("attention ") + name + " is " + in[static_cast<size_t>(i)].str() + " but input " +
                    x.str() + " needs " + TensorDesc{s, pt}.str());
  };
  expect(ix.w_in, Shape{rows, d}, "in_proj_weight");
  expect(ix.w_out, Shape{d, n.dc()}, "out_proj.weight");
  if (bias) {
    expect(ix.b_in, Shape{rows}, "in_proj_bias");
    expect(ix.b_out, Shape{d}, "out_proj.bias");
  }
  return {x, {Shape{b, t, rows}, x.dtype}, {Shape{b, t, n.dc()}, x.dtype}, {Shape{b, h, t}, lse_dtype(x.dtype)}};
}

// Query rows [r0, r1) of head `hh` of sample `bi`: scores into the unit's scratch (rows x T), causal mask,
// softmax (PyTorch's: exp(s - max) / sum), the rows' log-sum-exp max + log(sum), dropout, context rows. Causal
// rows see keys 0..i, so the block only computes keys < r1. qkv (B, T, n.ld()); context (B, T, d); lse (B, h, T).
template <typename T>
void forward_block(const Dims& n, int64_t bi, int64_t hh, int64_t r0, int64_t r1, bool causal, double p,
                   uint64_t key, uint64_t mask_base, const T* qkv, T* s, T* context, T* lse) {
  int64_t ld = n.ld(), rows = r1 - r0, ncols = causal ? r1 : n.t, g = hh / n.group();
  const T* q = qkv + (bi * n.t + r0) * ld + n.q_off(hh);
  const T* k = qkv + bi * n.t * ld + n.k_off(g);
  const T* v = qkv + bi * n.t * ld + n.v_off(g);
  int64_t plane = (bi * n.h + hh) * n.t * n.t;
  T scale = T(1) / std::sqrt(static_cast<T>(n.dh));
  cpu::gemm(false, true, rows, ncols, n.dh, scale, q, ld, k, ld, T(0), s, ncols);
  T keep_scale = static_cast<T>(1.0 / (1.0 - p));
  for (int64_t r = 0; r < rows; ++r) {
    int64_t i = r0 + r, valid = causal ? i + 1 : n.t;
    T* row = s + r * ncols;
    const T mx = cpu_vec([&] { return row_max(row, valid); });
    for (int64_t j = 0; j < valid; ++j) row[j] = cpu::exp_of(row[j] - mx);  // vectorises (fast_math.h: 1 ulp)
    double acc[cpu::kSumLanes] = {};
    cpu::add_to_lanes(row, valid, acc);  // fixed lanes: the same sum for any vector width
    const T sum = static_cast<T>(cpu::lane_total(acc));
    lse[(bi * n.h + hh) * n.t + i] = mx + std::log(sum);
    T inv = T(1) / sum;
    for (int64_t j = 0; j < valid; ++j) row[j] *= inv;
    std::fill(row + valid, row + ncols, T(0));
    if (p > 0) {
      uint64_t base = mask_base + static_cast<uint64_t>(plane + i * n.t), thr = keep_threshold(p);
      for (int64_t j = 0; j < valid; ++j) row[j] = kept_at(key, base + static_cast<uint64_t>(j), thr) ? row[j] * keep_scale : T(0);
    }
  }
  cpu::gemm(false, false, rows, n.dh, ncols, T(1), s, ncols, v, ld, T(0), context + (bi * n.t + r0) * n.dc() + hh * n.dh,
            n.dc());
}

// Units of work: (sample, head, block of query rows), in slots that own fixed ranges of them (deterministic for
// any thread count), each slot with its own scratch of `per_slot` elements.
struct Units {
  int64_t rb, blocks, count, slots;
  Units(const Dims& n) : rb(row_block(n.t, n.dh)), blocks((n.t + rb - 1) / rb), count(n.b * n.h * blocks),
                         slots(std::min(count, kMaxSlots)) {}
};

// The slots' score planes, then the rope table.
size_t attention_workspace(const Attrs& a, std::span<const TensorDesc> in, std::span<const TensorDesc>) {
  Dims n = dims_of(a, in[0].shape, context_features(in[static_cast<size_t>(ParamIdx(a.b("bias")).w_out)]));
  Units u(n);
  return static_cast<size_t>(size_mul(size_mul(size_mul(u.slots, u.rb), n.t) + rope_elems(a, n),
                                      static_cast<int64_t>(dtype_size(in[0].dtype))));
}

void attention_cpu(const KernelCtx& ctx, const Attrs& a, std::span<const Tensor> in, std::span<const Tensor> out) {
  bool bias = a.b("bias"), causal = a.b("causal");
  ParamIdx ix(bias);
  const Tensor& w_out = in[static_cast<size_t>(ix.w_out)];
  Dims n = dims_of(a, in[0].shape(), w_out.shape().rank() == 2 ? w_out.shape()[1] : 0);
  // Dropout only in training; the dropped-probs output (present when dropout > 0) then holds probs.
  double p = ctx.training ? a.f("dropout") : 0.0;
  const auto mask_base = static_cast<uint64_t>(ctx.batch_offset * n.h * n.t * n.t);  // global flat index of sample 0
  dispatch_float(out[0].dtype(), [&]<typename T>() {
    auto ptr = [&](int i) { return i < 0 ? nullptr : in[static_cast<size_t>(i)].data<T>(); };
    T* qkv = out[kOutQkv].data<T>();
    T* context = out[kOutContext].data<T>();
    T* lse = out[kOutLse].data<T>();  // lse_dtype(T) is T for f32 and f64
    Units u(n);
    BRAID_ASSERT(ctx.workspace_bytes >= static_cast<size_t>(u.slots * u.rb * n.t + rope_elems(a, n)) * sizeof(T),
                 "attention: workspace of ", ctx.workspace_bytes, " bytes is too small");
    // 1. qkv = x W_in^T + b_in, then q and k rotated (rope)
    cpu::affine_rows<T>(in[0].data<T>(), n.b * n.t, n.d, ptr(ix.w_in), ptr(ix.b_in), n.ld(), qkv);
    if (rope_elems(a, n) > 0) {
      T* table = static_cast<T*>(ctx.workspace) + u.slots * u.rb * n.t;
      rope_table<T>(a.f("rope_theta"), n.t, n.dh, table);
      rope_rotate<T>(n, table, qkv, false);
    }
    // 2. attention per (sample, head, block of query rows): independent units
    parallel_for(u.slots, 1, [&](int64_t s0, int64_t s1) {
      for (int64_t sl = s0; sl < s1; ++sl) {
        T* scratch = static_cast<T*>(ctx.workspace) + sl * u.rb * n.t;
        for (int64_t w = sl * u.count / u.slots; w < (sl + 1) * u.count / u.slots; ++w) {
          int64_t blk = w % u.blocks, pair = w / u.blocks, r0 = blk * u.rb;
          forward_block<T>(n, pair / n.h, pair % n.h, r0, std::min(n.t, r0 + u.rb), causal, p, ctx.rng_key, mask_base,
                           qkv, scratch, context, lse);
        }
      }
    });
    // 3. y = context W_out^T + b_out
    cpu::affine_rows<T>(context, n.b * n.t, n.dc(), ptr(ix.w_out), ptr(ix.b_out), n.d, out[kOutY].data<T>());
  });
}

void attention_grad_rule(GradCtx& c) {
  ValueId dy = c.dout[0];
  if (!dy.valid()) return;
  bool bias = c.attrs.b("bias");
  ParamIdx ix(bias);
  auto needs = [&](int i) { return i >= 0 && c.needs[static_cast<size_t>(i)]; };
  auto set = [&](int i, ValueId v) { c.din[static_cast<size_t>(i)] = v; };
  const auto& o = c.outputs;
  // out_proj: y = context W_out^T + b_out
  if (needs(ix.w_out)) set(ix.w_out, c.g.emit("linear_dw", {}, {dy, o[kOutContext]})[0]);
  if (needs(ix.b_out)) set(ix.b_out, c.g.emit("linear_db", {}, {dy})[0]);
  if (!needs(0) && !needs(ix.w_in) && !needs(ix.b_in)) return;
  ValueId dcontext = c.g.emit("linear_dx", {}, {dy, c.inputs[static_cast<size_t>(ix.w_out)]})[0];
  // attention core: context -> qkv
  std::vector<ValueId> core{dcontext, o[kOutQkv], o[kOutContext], o[kOutLse]};
  Attrs ga{{"heads", c.attrs.i("heads")}, {"kv_heads", c.attrs.i("kv_heads")}, {"rope_theta", c.attrs.f("rope_theta")},
           {"causal", c.attrs.b("causal")}, {"dropout", c.attrs.f("dropout")}, {"rng_node", c.node_name}};
  ValueId dqkv = c.g.emit("attention_grad", ga, core)[0];
  // in_proj: qkv = x W_in^T + b_in; the weight gradients first, as linear's (x dies before dx is born)
  if (needs(ix.w_in)) set(ix.w_in, c.g.emit("linear_dw", {}, {dqkv, c.inputs[0]})[0]);
  if (needs(ix.b_in)) set(ix.b_in, c.g.emit("linear_db", {}, {dqkv})[0]);
  if (needs(0)) set(0, c.g.emit("linear_dx", {}, {dqkv, c.inputs[static_cast<size_t>(ix.w_in)]})[0]);
}

std::vector<SplitSignature> attention_splits(const Attrs& a, std::span<const TensorDesc> in,
                                             std::span<const TensorDesc> out) {
  auto sigs = all_broadcast(in, out);
  // data: samples split, parameters replicated; every output carries the batch axis. With dropout too: the
  // mask is a function of the element's global index (KernelCtx::batch_offset), so shards draw the unsplit mask.
  {
    SplitSignature s{"data", std::vector<Sbp>(in.size(), Sbp::B()), std::vector<Sbp>(out.size(), Sbp::S(0))};
    s.inputs[0] = Sbp::S(0);
    sigs.push_back(s);
  }
  // heads (Megatron-LM's tensor-parallel attention): each device runs heads/n q heads and kv_heads/n kv heads, so n
  // must divide kv_heads (then heads too): in_proj_weight's and in_proj_bias's rows [q | k | v] are split per part
  // (Sbp segments of heads, kv_heads, kv_heads head-sized units: a device holds its q heads' rows, then its kv heads'
  // k rows and v rows), qkv likewise, context and out_proj.weight's columns by heads, lse by heads; out_proj's output
  // is a partial sum (its bias entering as a partial: added once). Not with dropout: the mask is drawn by the global
  // head index, which a device's kernel does not know.
  if (a.f("dropout") == 0 && in.size() >= 3 && out.size() == 4) {
    const bool bias = a.b("bias");
    const std::array<int64_t, 3> qkv_rows{a.i("heads"), a.i("kv_heads"), a.i("kv_heads")};
    SplitSignature h{"heads", {Sbp::B(), Sbp::S(0, qkv_rows)},
                     {Sbp::P(), Sbp::S(2, qkv_rows), Sbp::S(2), Sbp::S(1)}};
    if (bias) h.inputs.push_back(Sbp::S(0, qkv_rows));
    h.inputs.push_back(Sbp::S(1));
    if (bias) h.inputs.push_back(Sbp::P());
    if (h.inputs.size() == in.size()) sigs.push_back(h);
  }
  return sigs;
}

Cost attention_cost(const Attrs& a, std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
  Cost c = default_cost(in, out, 0);
  const Dims n = dims_of(a, in[0].shape, context_features(in[static_cast<size_t>(ParamIdx(a.b("bias")).w_out)]));
  double b = static_cast<double>(n.b), t = static_cast<double>(n.t), d = static_cast<double>(n.d),
         h = static_cast<double>(n.h), rows = static_cast<double>(n.ld()), dc = static_cast<double>(n.dc());
  double tri = a.b("causal") ? 0.5 : 1.0;  // causal rows skip the future keys
  c.flops = 2 * b * t * d * (rows + dc)        // in_proj (q, k and v rows: 3d without GQA) and out_proj (d x dc)
            + tri * 4 * b * t * t * dc         // q k^T and probs v over the q heads
            + tri * 5 * b * h * t * t;         // softmax (and dropout)
  if (rope_elems(a, n) > 0) {  // 3 flops per rotated element of q and k, the table read per row
    c.flops += 3 * b * t * static_cast<double>((n.h + n.kvh) * n.dh);
    c.bytes += static_cast<double>(n.t * n.dh) * static_cast<double>(dtype_size(in[0].dtype));
  }
  return c;
}

std::vector<Sample> attention_samples() {
  auto s = [](const std::string& name, int64_t heads, bool causal, bool bias, double dropout) {
    return Sample{name,
                  {{"heads", heads}, {"causal", causal}, {"bias", bias}, {"dropout", dropout}},
                  {{TensorDesc{Shape{2, 5, 8}}}}};
  };
  // Grouped-query attention and rotary embeddings (kv_heads, rope_theta), on x of `shape`.
  auto g = [](const std::string& name, int64_t heads, int64_t kv_heads, double theta, bool causal, bool bias,
              double dropout, Shape shape) {
    return Sample{name,
                  {{"heads", heads}, {"kv_heads", kv_heads}, {"rope_theta", theta}, {"causal", causal}, {"bias", bias},
                   {"dropout", dropout}},
                  {{TensorDesc{shape}}}};
  };
  return {s("h1_bias", 1, false, true, 0.0), s("h2_causal_bias", 2, true, true, 0.0),
          s("h4_nobias", 4, false, false, 0.0), s("h2_causal_nobias", 2, true, false, 0.0),
          s("h2_dropout", 2, true, true, 0.3),
          g("gqa_h4_kv2_bias", 4, 2, 0.0, false, true, 0.0, Shape{2, 5, 8}),
          g("gqa_h4_kv1_causal_nobias", 4, 1, 0.0, true, false, 0.0, Shape{2, 5, 8}),
          g("rope_h2_bias", 2, 2, 10.0, false, true, 0.0, Shape{2, 5, 8}),
          g("rope_h2_causal_nobias", 2, 2, 10000.0, true, false, 0.0, Shape{2, 6, 8}),
          g("gqa_rope_h4_kv2_causal_bias", 4, 2, 10.0, true, true, 0.0, Shape{2, 6, 16}),
          g("gqa_rope_h4_kv1_nobias", 4, 1, 500000.0, false, false, 0.0, Shape{1, 7, 16}),
          g("gqa_rope_h4_kv2_dropout", 4, 2, 10.0, true, true, 0.3, Shape{2, 5, 16})};
}

std::vector<BadSample> attention_bad() {
  auto a = [](int64_t heads, double dropout) { return Attrs{{"heads", heads}, {"dropout", dropout}}; };
  auto g = [](int64_t heads, int64_t kv_heads, double theta) {
    return Attrs{{"heads", heads}, {"kv_heads", kv_heads}, {"rope_theta", theta}};
  };
  return {{"heads_not_dividing", a(3, 0.0), {TensorDesc{Shape{2, 5, 8}}}, "heads 3 does not divide the features d = 8"},
          {"rank2", a(2, 0.0), {TensorDesc{Shape{2, 8}}}, "needs x [batch, seq, features]"},
          {"dropout_one", a(2, 1.0), {TensorDesc{Shape{2, 5, 8}}}, "dropout must be in [0, 1)"},
          {"int_input", a(2, 0.0), {TensorDesc{Shape{2, 5, 8}, DType::i32}}, "must be floating point"},
          {"kv_heads_not_dividing", g(4, 3, 0.0), {TensorDesc{Shape{2, 5, 8}}}, "kv_heads 3 does not divide heads 4"},
          {"kv_heads_above_heads", g(2, 4, 0.0), {TensorDesc{Shape{2, 5, 8}}}, "kv_heads 4 does not divide heads 2"},
          {"rope_negative", g(2, 2, -1.0), {TensorDesc{Shape{2, 5, 8}}}, "rope_theta must be 0 (no rotary embedding) or positive"},
          {"rope_odd_head_size", g(2, 2, 10000.0), {TensorDesc{Shape{2, 5, 6}}}, "need an even head size, got d / heads = 6 / 2 = 3"}};
}

// ---- attention_grad(dcontext, qkv, context, lse) -> dqkv ----------------------------------------------------
std::vector<TensorDesc> grad_infer(const Attrs& a, std::span<const TensorDesc> in) {
  BRAID_ASSERT(in.size() == 4u, "attention_grad: ", in.size(), " inputs");
  // All heads, or a device's share of them (the `heads` split): heads_l q heads and kv_heads heads_l / heads kv heads.
  BRAID_ASSERT(in[0].shape.rank() == 3 && in[1].shape.rank() == 3 && in[3].shape.rank() == 3, "attention_grad: ranks");
  const int64_t hl = in[3].shape[1], h = a.i("heads"), kvh = a.i("kv_heads");
  BRAID_ASSERT(hl > 0 && h % hl == 0 && kvh % (h / hl) == 0 && in[0].shape[2] % hl == 0, "attention_grad: lse ",
               in[3].str(), " for heads ", h, ", kv_heads ", kvh);
  const Dims n = grad_dims(in[0].shape, in[1].shape, in[3].shape);
  BRAID_ASSERT(n.kvh == kvh * hl / h && in[1].shape[2] == n.ld(), "attention_grad: qkv ", in[1].str(), " for dcontext ",
               in[0].str());
  BRAID_ASSERT(in[2].shape == in[0].shape, "attention_grad: context ", in[2].str(), " for dcontext ", in[0].str());
  BRAID_ASSERT(in[3].shape == (Shape{in[0].shape[0], hl, in[0].shape[1]}), "attention_grad: lse ", in[3].str(),
               " for dcontext ", in[0].str());
  return {in[1]};
}

// Three (rows x T) planes per slot (one slot per (sample, kv head) unit at most): the probabilities, the dropped
// probabilities (with dropout) and dP; then the rope table.
size_t grad_workspace(const Attrs& a, std::span<const TensorDesc> in, std::span<const TensorDesc>) {
  const Dims n = grad_dims(in[0].shape, in[1].shape, in[3].shape);
  int64_t units = n.b * n.kvh;
  int64_t per_slot = size_mul(3 * row_block(n.t, n.dh), n.t);
  return static_cast<size_t>(size_mul(size_mul(std::min(units, kMaxSlots), per_slot) + rope_elems(a, n),
                                      static_cast<int64_t>(dtype_size(in[0].dtype))));
}

// Backward of one (sample, q head), query rows in blocks (causal blocks skip future keys); dK and dV (of the head's
// kv head, zeroed by the caller) accumulate over the blocks in order. Per block, with s = 1/sqrt(dh), P = exp(s Q K^T - lse) recomputed (masked), Z the
// dropout mask scaled 1/(1 - p) (drawn again from the forward's key, once per element: a kept element is one
// whose P Z is not zero, P being a normal float) and O the forward's context rows:
//   dV += (P Z)^T dO;  dPd = dO V^T;  D = rowsum(dO * O);  dS = P * (Z dPd - D);  dQ = s dS K;  dK += s dS^T Q.
// (rowsum(dO * O) = rowsum(Z dPd * P): O's rows are the dropped probabilities times V.)
template <typename T>
void backward_pair(const Dims& n, int64_t bi, int64_t hh, bool causal, double p, uint64_t key, uint64_t mask_base,
                   const T* dcontext, const T* qkv, const T* context, const T* lse, T* dqkv, T* sp, T* sz, T* sg) {
  int64_t ld = n.ld(), row0 = bi * n.t * ld, plane = (bi * n.h + hh) * n.t * n.t, g = hh / n.group();
  const T *q = qkv + row0 + n.q_off(hh), *k = qkv + row0 + n.k_off(g), *v = qkv + row0 + n.v_off(g);
  T *dq = dqkv + row0 + n.q_off(hh), *dk = dqkv + row0 + n.k_off(g), *dv = dqkv + row0 + n.v_off(g);
  const int64_t ldc = n.dc();
  const T* dc = dcontext + bi * n.t * ldc + hh * n.dh;
  const T* o = context + bi * n.t * ldc + hh * n.dh;
  const T* lrow = lse + (bi * n.h + hh) * n.t;
  T scale = T(1) / std::sqrt(static_cast<T>(n.dh)), keep_scale = static_cast<T>(1.0 / (1.0 - p));
  int64_t rb = row_block(n.t, n.dh);
  for (int64_t r0 = 0; r0 < n.t; r0 += rb) {
    int64_t r1 = std::min(n.t, r0 + rb), rows = r1 - r0, ncols = causal ? r1 : n.t;
    // P, and in sz the dropped probabilities P Z for dV
    cpu::gemm(false, true, rows, ncols, n.dh, scale, q + r0 * ld, ld, k, ld, T(0), sp, ncols);
    for (int64_t r = 0; r < rows; ++r) {
      int64_t i = r0 + r, valid = causal ? i + 1 : ncols;
      T* prow = sp + r * ncols;
      const T l = lrow[i];
      for (int64_t j = 0; j < valid; ++j) prow[j] = cpu::exp_of(prow[j] - l);
      std::fill(prow + valid, prow + ncols, T(0));
      if (p > 0) {
        T* zrow = sz + r * ncols;
        const uint64_t mrow = mask_base + static_cast<uint64_t>(plane + i * n.t), thr = keep_threshold(p);
        for (int64_t j = 0; j < valid; ++j) zrow[j] = kept_at(key, mrow + static_cast<uint64_t>(j), thr) ? prow[j] * keep_scale : T(0);
        std::fill(zrow + valid, zrow + ncols, T(0));
      }
    }
    cpu::gemm(true, false, ncols, n.dh, rows, T(1), p > 0 ? sz : sp, ncols, dc + r0 * ldc, ldc, T(1), dv, ld);
    // dPd = dO V^T, then dS in place
    cpu::gemm(false, true, rows, ncols, n.dh, T(1), dc + r0 * ldc, ldc, v, ld, T(0), sg, ncols);
    for (int64_t r = 0; r < rows; ++r) {
      int64_t i = r0 + r, valid = causal ? i + 1 : ncols;
      T* g = sg + r * ncols;
      const T* prow = sp + r * ncols;
      const T dot = static_cast<T>(cpu_vec([&] { return row_dot(dc + i * ldc, o + i * ldc, n.dh); }));
      if (p > 0) {
        const T* zrow = sz + r * ncols;
        for (int64_t j = 0; j < valid; ++j) g[j] = prow[j] * ((zrow[j] != T(0) ? g[j] * keep_scale : T(0)) - dot);
      } else {
        for (int64_t j = 0; j < valid; ++j) g[j] = prow[j] * (g[j] - dot);
      }
      std::fill(g + valid, g + ncols, T(0));
    }
    cpu::gemm(false, false, rows, n.dh, ncols, scale, sg, ncols, k, ld, T(0), dq + r0 * ld, ld);
    cpu::gemm(true, false, ncols, n.dh, rows, scale, sg, ncols, q + r0 * ld, ld, T(1), dk, ld);
  }
}

void grad_cpu(const KernelCtx& ctx, const Attrs& a, std::span<const Tensor> in, std::span<const Tensor> out) {
  const Dims n = grad_dims(in[0].shape(), in[1].shape(), in[3].shape());
  bool causal = a.b("causal");
  double p = a.f("dropout");
  const auto mask_base = static_cast<uint64_t>(ctx.batch_offset * n.h * n.t * n.t);
  // Units of work: (sample, kv head), each running the backward of its q heads in order (dK and dV sum over them).
  int64_t units = n.b * n.kvh, slots = std::min(units, kMaxSlots), plane_elems = row_block(n.t, n.dh) * n.t;
  dispatch_float(out[0].dtype(), [&]<typename T>() {
    BRAID_ASSERT(ctx.workspace_bytes >= static_cast<size_t>(slots * 3 * plane_elems + rope_elems(a, n)) * sizeof(T),
                 "attention_grad: workspace of ", ctx.workspace_bytes, " bytes is too small");
    T* dqkv = out[0].data<T>();
    const int64_t ld = n.ld();
    // Slots own fixed ranges of units and process them in order: deterministic for any thread count.
    parallel_for(slots, 1, [&](int64_t s0, int64_t s1) {
      for (int64_t s = s0; s < s1; ++s) {
        T* sp = static_cast<T*>(ctx.workspace) + s * 3 * plane_elems;
        for (int64_t un = s * units / slots; un < (s + 1) * units / slots; ++un) {
          const int64_t bi = un / n.kvh, g = un % n.kvh;
          for (int64_t i = 0; i < n.t; ++i) {
            std::fill_n(dqkv + (bi * n.t + i) * ld + n.k_off(g), n.dh, T(0));
            std::fill_n(dqkv + (bi * n.t + i) * ld + n.v_off(g), n.dh, T(0));
          }
          for (int64_t hh = g * n.group(); hh < (g + 1) * n.group(); ++hh)
            backward_pair<T>(n, bi, hh, causal, p, ctx.rng_key, mask_base, in[0].data<T>(), in[1].data<T>(),
                             in[2].data<T>(), in[3].data<T>(), dqkv, sp, sp + plane_elems, sp + 2 * plane_elems);
        }
      }
    });
    // dq and dk are of the rotated q and k: rotate them back (R^T).
    if (rope_elems(a, n) > 0) {
      T* table = static_cast<T*>(ctx.workspace) + slots * 3 * plane_elems;
      rope_table<T>(a.f("rope_theta"), n.t, n.dh, table);
      rope_rotate<T>(n, table, dqkv, true);
    }
  });
}

std::vector<SplitSignature> grad_splits(const Attrs&, std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
  auto sigs = all_broadcast(in, out);
  // data: every operand carries the batch axis (the backward draws no random numbers).
  sigs.push_back({"data", std::vector<Sbp>(in.size(), Sbp::S(0)), {Sbp::S(0)}});
  // partial: linear in dcontext (qkv, context and lse replicated; D = rowsum(dO * O) is linear in dO too).
  SplitSignature partial{"partial", std::vector<Sbp>(in.size(), Sbp::B()), {Sbp::P()}};
  partial.inputs[0] = Sbp::P();
  sigs.push_back(partial);
  return sigs;
}

Cost grad_cost(const Attrs& a, std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
  Cost c = default_cost(in, out, 0);
  const Dims n = grad_dims(in[0].shape, in[1].shape, in[3].shape);
  double b = static_cast<double>(n.b), t = static_cast<double>(n.t), d = static_cast<double>(n.d),
         h = static_cast<double>(n.h);
  double tri = a.b("causal") ? 0.5 : 1.0;
  c.flops = tri * 10 * b * t * t * d  // S = Q K^T again, dV = (P Z)^T dO, dPd = dO V^T, dQ = dS K, dK = dS^T Q
            + tri * 7 * b * h * t * t;  // exp(s - lse), dropout mask and softmax backward
  if (rope_elems(a, n) > 0) {  // dq and dk rotated back, the table read per row
    c.flops += 3 * b * t * static_cast<double>((n.h + n.kvh) * n.dh);
    c.bytes += static_cast<double>(n.t * n.dh) * static_cast<double>(dtype_size(in[0].dtype));
  }
  return c;
}

void kv_heads_default(Attrs& a) {
  if (!a.has("kv_heads") && a.has("heads")) a.set("kv_heads", a.i("heads"));
}

}  // namespace

void register_attention(Registry& r) {
  AttrSpec heads{"heads", AttrKind::Int, std::nullopt, false, {}, 0, true, false, "number of heads (divides d)"};
  AttrSpec causal{"causal", AttrKind::Bool, AttrValue(false), false, {}, 0, false, false, "mask future positions"};
  AttrSpec dropout{"dropout", AttrKind::Float, AttrValue(0.0), false, {}, 0, false, false,
                   "dropout on the attention probabilities in training"};
  AttrSpec kv_heads{"kv_heads", AttrKind::Int, std::nullopt, true, {}, 0, true, false,
                    "key/value heads (grouped-query attention; divides heads; default heads)"};
  AttrSpec rope_theta{"rope_theta", AttrKind::Float, AttrValue(0.0), false, {}, 0, false, false,
                      "rotary position embedding base on q and k (0: none)"};
  {
    OpDef d;
    d.name = "attention";
    d.autocast = Autocast::Half;
    d.doc = "multi-head self-attention on x [B, T, d] (nn.MultiheadAttention, batch_first, query = key = value)";
    d.attrs = {heads, causal, dropout,
               {"bias", AttrKind::Bool, AttrValue(true), false, {}, 0, false, false, "projection biases"}, kv_heads,
               rope_theta};
    d.canonicalize = kv_heads_default;
    d.public_outputs = 1;
    d.params = attention_params;
    d.infer = attention_infer;
    d.workspace = attention_workspace;
    d.grad = attention_grad_rule;
    d.splits = attention_splits;
    d.cost = attention_cost;
    d.cpu = attention_cpu;
    d.samples = attention_samples;
    d.bad_samples = attention_bad;
    // Four chained fp32 GEMMs and a softmax; PyTorch scales q before q k^T where braid scales the product, so
    // results agree to a few ulps of the largest intermediate (seen: 1.4e-6 absolute), not bit for bit. atol is
    // loosened because some gradients are zero in exact arithmetic (the k part of in_proj_bias: softmax ignores
    // a shift shared by a row) and both sides then hold rounding noise.
    d.torch_rtol = 1e-5;
    d.torch_atol = 1e-5;
    d.gradcheck_tol = 1e-6;
    r.add(d);
  }
  {
    OpDef d;
    d.name = "attention_grad";
    d.doc = "gradient of attention's core: context gradient -> gradient of qkv";
    d.internal = true;
    d.differentiable = false;
    d.attrs = {heads, kv_heads, rope_theta, causal, dropout,
               {"rng_node", AttrKind::String, AttrValue(std::string()), false, {}, 0, false, false,
                "the forward node whose random stream (dropout mask) the backward draws again"}};
    d.canonicalize = kv_heads_default;
    d.min_inputs = 4;
    d.max_inputs = 4;
    d.infer = grad_infer;
    d.workspace = grad_workspace;
    d.splits = grad_splits;
    d.cost = grad_cost;
    d.cpu = grad_cpu;
    r.add(d);
  }
}

}  // namespace braid::ops
