// CUDA adapters of the dense op families (elementwise, dropout, norm, loss, shape, linear, embedding,
// attention): read sizes and attributes exactly as the CPU kernels in ops/defs/*.cpp do and call the
// launchers of launch.h. C++20 (the .cu files stay C++17 behind launch.h).
#include <algorithm>
#include <cmath>

#include "backends/cuda/kernels/kernels.h"

namespace braid::ops::cuda_table {
namespace {

namespace cu = braid::cuda;
using Span = std::span<const Tensor>;

cu::BcastIndex bcast_index(const Shape& in, const Shape& out) {
  BRAID_ASSERT(out.rank() <= cu::kMaxRank, "CUDA kernels take tensors of rank <= 8, got ", out.str());
  cu::BcastIndex b;
  b.rank = out.rank();
  int64_t stride = 1;
  for (int k = out.rank() - 1; k >= 0; --k) {
    int ik = k - (out.rank() - in.rank());
    b.dims[k] = out[k];
    b.strides[k] = (ik >= 0 && in[ik] == out[k]) ? stride : 0;
    if (ik >= 0) stride *= in[ik];
  }
  return b;
}

cu::BcastIndex identity_index(const Shape& s) { return bcast_index(s, s); }

// Per-sample axis (negative from the end) -> graph axis.
int graph_axis(int64_t axis, const Shape& s) {
  int r = s.rank() - 1;
  return static_cast<int>(axis < 0 ? axis + r : axis) + 1;
}

bool is_i64(const Tensor& t) { return t.dtype() == DType::i64; }

// ---- elementwise -----------------------------------------------------------------------------------------
template <bool kMul>
void nary_cuda(const CudaCtx& c, const Attrs&, Span in, Span out) {
  std::vector<const void*> x;
  std::vector<cu::BcastIndex> idx;
  for (const auto& t : in) {
    x.push_back(t.raw());
    idx.push_back(bcast_index(t.shape(), out[0].shape()));
  }
  cu::nary(c, out[0].dtype(), kMul, static_cast<int>(in.size()), x.data(), idx.data(), out[0].raw(), out[0].numel());
}

void reduce_like_cuda(const CudaCtx& c, const Attrs&, Span in, Span out) {
  const Shape &g = in[0].shape(), &o = out[0].shape();
  BRAID_ASSERT(g.rank() <= cu::kMaxRank, "reduce_like on GPU takes rank <= 8");
  cu::ReduceIndex r;
  std::vector<int64_t> gstride(static_cast<size_t>(g.rank()));
  int64_t s = 1;
  for (int k = g.rank() - 1; k >= 0; --k) {
    gstride[static_cast<size_t>(k)] = s;
    s *= g[k];
  }
  const int shift = g.rank() - o.rank();
  r.kept_rank = o.rank();
  for (int k = 0; k < o.rank(); ++k) {
    r.kept_dims[k] = o[k];
    r.kept_strides[k] = o[k] == g[k + shift] ? gstride[static_cast<size_t>(k + shift)] : 0;
  }
  for (int k = 0; k < g.rank(); ++k) {
    int ok = k - shift;
    bool reduced = ok < 0 || (o[ok] != g[k]);
    if (!reduced) continue;
    r.red_dims[r.red_rank] = g[k];
    r.red_strides[r.red_rank] = gstride[static_cast<size_t>(k)];
    ++r.red_rank;
    r.red_count *= g[k];
  }
  cu::reduce_like(c, out[0].dtype(), in[0].raw(), r, out[0].raw(), out[0].numel());
}

void cast_cuda(const CudaCtx& c, const Attrs&, Span in, Span out) {
  if (in[0].dtype() == out[0].dtype()) {
    cu::copy(c, out[0].raw(), in[0].raw(), in[0].bytes());
    return;
  }
  cu::cast(c, in[0].dtype(), in[0].raw(), out[0].dtype(), out[0].raw(), out[0].numel());
}

void ones_like_cuda(const CudaCtx& c, const Attrs&, Span, Span out) {
  cu::fill(c, out[0].dtype(), out[0].raw(), out[0].numel(), 1.0);
}

// The activation list's kernels (ops/activation.h): one per op, the variant read from the node's attributes.
template <cu::Act kFirst>
void act_cuda(const CudaCtx& c, const Attrs& a, Span in, Span out) {
  cu::activation(c, out[0].dtype(), activation_of(kFirst, a), in[0].raw(), out[0].raw(), out[0].numel());
}
template <cu::Act kFirst>
void act_grad_cuda(const CudaCtx& c, const Attrs& a, Span in, Span out) {
  cu::activation_grad(c, out[0].dtype(), activation_of(kFirst, a), in[0].raw(), in[1].raw(), out[0].raw(),
                      out[0].numel());
}

// dropout(x) -> y and dropout_grad(dy) -> dx: the same draw of the mask (dropout_grad's key is its forward's), kept by
// neither.
void dropout_cuda(const CudaCtx& c, const Attrs& a, Span in, Span out) {
  double p = a.f("p");
  const Shape& s = in[0].shape();
  const int64_t n = in[0].numel(), per_sample = s[0] > 0 ? n / s[0] : 0;
  cu::ShardIndex ix;  // the element's index in the unsplit tensor, as dropout_cpu's global()
  const int ax = c.shard_axis > 0 && c.shard_axis < s.rank() ? c.shard_axis : 0;
  if (ax == 0) {
    ix.base = static_cast<uint64_t>(c.batch_offset * per_sample);
  } else {
    int64_t rows_per_sample = 1;
    for (int d = ax + 1; d < s.rank(); ++d) ix.inner *= s[d];
    for (int d = 1; d < ax; ++d) rows_per_sample *= s[d];
    ix.len = s[ax];
    ix.full = c.shard_full;
    ix.start = c.shard_start;
    ix.row0 = c.batch_offset * rows_per_sample;
  }
  cu::dropout(c, in[0].dtype(), in[0].raw(), out[0].raw(), nullptr, in[0].dtype(), n, p, c.training && p > 0, c.rng_key,
              ix);
}

// ---- norm --------------------------------------------------------------------------------------------------
void layer_norm_cuda(const CudaCtx& c, const Attrs& a, Span in, Span out) {
  int64_t d = in[0].shape().back(), rows = in[0].numel() / std::max<int64_t>(d, 1);
  cu::layer_norm(c, in[0].dtype(), in[0].raw(), in[1].raw(), in[2].raw(), out[0].raw(), out[1].raw(), out[2].raw(),
                 rows, d, a.f("eps"));
}
void layer_norm_grad_cuda(const CudaCtx& c, const Attrs&, Span in, Span out) {
  int64_t d = in[1].shape().back(), rows = in[1].numel() / std::max<int64_t>(d, 1);
  cu::layer_norm_grad(c, in[1].dtype(), in[0].raw(), in[1].raw(), in[2].raw(), in[3].raw(), in[4].raw(), out[0].raw(),
                      out[1].raw(), out[2].raw(), rows, d);
}
size_t layer_norm_grad_ws(const Attrs&, std::span<const TensorDesc> in, std::span<const TensorDesc>) {
  int64_t d = in[1].shape.back();
  return cu::layer_norm_grad_workspace(in[1].numel() / std::max<int64_t>(d, 1), d);
}
void rms_norm_cuda(const CudaCtx& c, const Attrs& a, Span in, Span out) {
  int64_t d = in[0].shape().back(), rows = in[0].numel() / std::max<int64_t>(d, 1);
  cu::rms_norm(c, in[0].dtype(), in[0].raw(), in[1].raw(), out[0].raw(), out[1].raw(), rows, d, a.f("eps"));
}
void rms_norm_grad_cuda(const CudaCtx& c, const Attrs&, Span in, Span out) {
  int64_t d = in[1].shape().back(), rows = in[1].numel() / std::max<int64_t>(d, 1);
  cu::rms_norm_grad(c, in[1].dtype(), in[0].raw(), in[1].raw(), in[2].raw(), in[3].raw(), out[0].raw(), out[1].raw(),
                    rows, d);
}
size_t rms_norm_grad_ws(const Attrs&, std::span<const TensorDesc> in, std::span<const TensorDesc>) {
  int64_t d = in[1].shape.back();
  return cu::rms_norm_grad_workspace(in[1].numel() / std::max<int64_t>(d, 1), d);
}

struct AxisView {
  int64_t outer = 1, n = 1, inner = 1;
};
AxisView axis_view(const Shape& s, int ax) {
  AxisView v;
  for (int i = 0; i < s.rank(); ++i) (i < ax ? v.outer : i == ax ? v.n : v.inner) *= s[i];
  return v;
}
void softmax_cuda(const CudaCtx& c, const Attrs& a, Span in, Span out) {
  AxisView v = axis_view(in[0].shape(), graph_axis(a.i("axis"), in[0].shape()));
  if (cu::cudnn_softmax(c, in[0].dtype(), in[0].raw(), out[0].raw(), v.outer, v.n, v.inner)) return;
  cu::softmax(c, in[0].dtype(), in[0].raw(), out[0].raw(), v.outer, v.n, v.inner);
}
void softmax_grad_cuda(const CudaCtx& c, const Attrs& a, Span in, Span out) {
  AxisView v = axis_view(in[1].shape(), graph_axis(a.i("axis"), in[1].shape()));
  if (cu::cudnn_softmax_grad(c, in[1].dtype(), in[0].raw(), in[1].raw(), out[0].raw(), v.outer, v.n, v.inner)) return;
  cu::softmax_grad(c, in[1].dtype(), in[0].raw(), in[1].raw(), out[0].raw(), v.outer, v.n, v.inner);
}

// ---- losses --------------------------------------------------------------------------------------------------
void cross_entropy_cuda(const CudaCtx& c, const Attrs&, Span in, Span out) {
  cu::cross_entropy(c, in[0].dtype(), in[0].raw(), in[1].raw(), is_i64(in[1]), out[0].raw(), in[1].numel(),
                    in[0].shape().back());
}
size_t rows_ws(const Attrs&, std::span<const TensorDesc> in, std::span<const TensorDesc>) {
  return static_cast<size_t>(in[1].numel()) * sizeof(double);
}
void cross_entropy_grad_cuda(const CudaCtx& c, const Attrs&, Span in, Span out) {
  cu::cross_entropy_grad(c, in[1].dtype(), in[0].raw(), in[1].raw(), in[2].raw(), is_i64(in[2]), out[0].raw(),
                         in[2].numel(), in[1].shape().back());
}
void mse_cuda(const CudaCtx& c, const Attrs&, Span in, Span out) {
  int64_t rows = in[0].shape()[0], m = rows > 0 ? in[0].numel() / rows : 0;
  cu::mse(c, in[0].dtype(), in[0].raw(), in[1].raw(), out[0].raw(), rows, m);
}
size_t mse_ws(const Attrs&, std::span<const TensorDesc> in, std::span<const TensorDesc>) {
  return static_cast<size_t>(in[0].shape[0]) * sizeof(double);
}
void mse_grad_cuda(const CudaCtx& c, const Attrs&, Span in, Span out) {
  cu::mse_grad(c, in[1].dtype(), in[0].raw(), in[1].raw(), in[2].raw(), out[0].raw(), out[1].raw(), in[1].numel());
}
void accuracy_cuda(const CudaCtx& c, const Attrs&, Span in, Span out) {
  cu::accuracy(c, in[0].dtype(), in[0].raw(), in[1].raw(), is_i64(in[1]), out[0].data<float>(), in[1].numel(),
               in[0].shape().back());
}

// ---- shape ----------------------------------------------------------------------------------------------------
void copy_cuda(const CudaCtx& c, const Attrs&, Span in, Span out) {
  BRAID_ASSERT(in[0].bytes() == out[0].bytes(), in[0].desc().str(), " -> ", out[0].desc().str());
  cu::copy(c, out[0].raw(), in[0].raw(), in[0].bytes());
}

void concat_cuda(const CudaCtx& c, const Attrs& a, Span in, Span out) {
  const Shape& os = out[0].shape();
  int ax = graph_axis(a.i("axis"), os);
  size_t es = dtype_size(out[0].dtype());
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < ax; ++i) outer *= os[i];
  for (int i = ax + 1; i < os.rank(); ++i) inner *= os[i];
  size_t row = static_cast<size_t>(os[ax] * inner) * es, off = 0;
  for (const auto& t : in) {
    size_t chunk = static_cast<size_t>(t.shape()[ax] * inner) * es;
    cu::copy_2d(c, static_cast<char*>(out[0].raw()) + off, row, t.raw(), chunk, chunk, static_cast<size_t>(outer));
    off += chunk;
  }
}

void slice_cuda(const CudaCtx& c, const Attrs& a, Span in, Span out) {
  const Shape& is = in[0].shape();
  int ax = graph_axis(a.i("axis"), is);
  size_t es = dtype_size(in[0].dtype());
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < ax; ++i) outer *= is[i];
  for (int i = ax + 1; i < is.rank(); ++i) inner *= is[i];
  size_t chunk = static_cast<size_t>(a.i("length") * inner) * es, in_row = static_cast<size_t>(is[ax] * inner) * es;
  cu::copy_2d(c, out[0].raw(), chunk, static_cast<const char*>(in[0].raw()) + static_cast<size_t>(a.i("start") * inner) * es,
              in_row, chunk, static_cast<size_t>(outer));
}

void transpose_cuda(const CudaCtx& c, const Attrs& a, Span in, Span out) {
  const Shape &is = in[0].shape(), &os = out[0].shape();
  const auto& perm = a.ints("perm");
  int r = is.rank();
  BRAID_ASSERT(r <= cu::kMaxRank, "transpose on GPU takes rank <= 8");
  std::vector<int> g{0};
  for (auto p : perm) g.push_back(static_cast<int>(p < 0 ? p + r - 1 : p) + 1);
  std::vector<int64_t> istride(static_cast<size_t>(r));
  int64_t s = 1;
  for (int i = r - 1; i >= 0; --i) {
    istride[static_cast<size_t>(i)] = s;
    s *= is[i];
  }
  cu::BcastIndex idx;
  idx.rank = r;
  for (int j = 0; j < r; ++j) {
    idx.dims[j] = os[j];
    idx.strides[j] = istride[static_cast<size_t>(g[static_cast<size_t>(j)])];
  }
  cu::gather_strided(c, dtype_size(in[0].dtype()), in[0].raw(), idx, out[0].raw(), out[0].numel());
}

// ---- linear ---------------------------------------------------------------------------------------------------
// Graphs with 16-bit values (graph::BuildOptions::half): a GEMM op's activations are 16-bit and its parameters
// f32 master weights, which it reads through their 16-bit copies (autocast_operand: Ctx::shadows). `t` is the
// values' dtype; f32 parameters of a 16-bit op come back as the copy, anything else as it is.
const void* param_operand(const CudaCtx& c, DType t, const Tensor& p, size_t* at) {
  if (!is_half(t) || p.dtype() != DType::f32) return p.raw();
  if (c.autocast == nullptr)
    throw InternalError("a graph of " + std::string(dtype_name(t)) + " values needs autocast on its executor "
                        "(CudaExecutorOptions::bf16) for the 16-bit copies of its f32 parameters");
  if (c.autocast_type != t)
    throw InternalError("a graph of " + std::string(dtype_name(t)) + " values runs under " +
                        std::string(dtype_name(c.autocast_type)) + " autocast (CudaExecutorOptions)");
  return cu::autocast_operand(c, p.raw(), p.numel(), at);
}

void linear_cuda(const CudaCtx& c, const Attrs&, Span in, Span out) {
  int64_t fout = in[1].shape()[0], fin = in[1].shape()[1];
  const DType t = out[0].dtype();
  size_t at = 0;
  const void* w = param_operand(c, t, in[1], &at);
  const void* b = in.size() == 3 ? param_operand(c, t, in[2], &at) : nullptr;
  cu::linear(c, t, in[0].raw(), w, b, out[0].raw(), in[0].numel() / fin, fin, fout, cu::Epilogue::Bias);
}
void linear_dx_cuda(const CudaCtx& c, const Attrs&, Span in, Span out) {
  int64_t fout = in[1].shape()[0], fin = in[1].shape()[1], m = in[0].numel() / fout;
  size_t at = 0;
  const void* w = param_operand(c, out[0].dtype(), in[1], &at);
  cu::gemm(c, out[0].dtype(), false, false, m, fin, fout, 1.f, in[0].raw(), fout, 0, w, fin, 0, 0.f, out[0].raw(), fin,
           0);
}
void linear_dw_cuda(const CudaCtx& c, const Attrs&, Span in, Span out) {
  int64_t fout = out[0].shape()[0], fin = out[0].shape()[1], m = in[0].numel() / fout;
  if (is_half(in[0].dtype())) {  // 16-bit dy and x, f32 dW (the master weight's gradient)
    if (c.autocast_type != in[0].dtype() || in[1].dtype() != in[0].dtype() || out[0].dtype() != DType::f32)
      throw InternalError("linear_dw of " + in[0].desc().str() + " and " + in[1].desc().str() + " into " +
                          out[0].desc().str() + " under " + std::string(dtype_name(c.autocast_type)) + " autocast");
    cu::gemm_autocast_f32(c, true, false, fout, fin, m, 1.f, in[0].raw(), fout, 0, in[1].raw(), fin, 0, 0.f,
                          out[0].raw(), fin, 0, 1);
    return;
  }
  cu::gemm(c, out[0].dtype(), true, false, fout, fin, m, 1.f, in[0].raw(), fout, 0, in[1].raw(), fin, 0, 0.f,
           out[0].raw(), fin, 0);
}
void linear_db_cuda(const CudaCtx& c, const Attrs&, Span in, Span out) {
  int64_t fout = out[0].numel();
  cu::colsum(c, in[0].dtype(), in[0].raw(), in[0].numel() / fout, fout, out[0].raw(), out[0].dtype());
}
size_t linear_db_ws(const Attrs&, std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
  return cu::colsum_workspace(in[0].numel() / out[0].numel(), out[0].numel());
}

// ---- embeddings --------------------------------------------------------------------------------------------------
void embedding_cuda(const CudaCtx& c, const Attrs&, Span in, Span out) {
  cu::embedding(c, out[0].dtype(), in[0].raw(), is_i64(in[0]), in[1].raw(), out[0].raw(), in[0].numel(),
                in[1].shape()[0], in[1].shape()[1]);
}
void embedding_dw_cuda(const CudaCtx& c, const Attrs&, Span in, Span out) {
  cu::embedding_dw(c, out[0].dtype(), in[0].raw(), in[1].raw(), is_i64(in[1]), out[0].raw(), in[1].numel(),
                   out[0].shape()[0], out[0].shape()[1]);
}
size_t embedding_dw_ws(const Attrs& a, std::span<const TensorDesc> in, std::span<const TensorDesc>) {
  return cu::embedding_dw_workspace(in[1].numel(), a.i("num"));
}
void position_cuda(const CudaCtx& c, const Attrs&, Span in, Span out) {
  const Shape& s = in[0].shape();
  cu::position_embedding(c, out[0].dtype(), in[0].raw(), in[1].raw(), out[0].raw(), s[0], s[1], s[2]);
}
void position_dw_cuda(const CudaCtx& c, const Attrs&, Span in, Span out) {
  const Shape& s = in[0].shape();
  cu::position_embedding_dw(c, out[0].dtype(), in[0].raw(), out[0].raw(), s[0], s[1], s[2], out[0].shape()[0]);
}

// ---- attention --------------------------------------------------------------------------------------------------
constexpr int kOutY = 0, kOutQkv = 1, kOutContext = 2, kOutLse = 3;

// The heads of one call, as ops/defs/attention.cpp's dims_of: all of them, or a device's under the `heads` split
// (out_proj.weight holds the columns of its heads' context features).
struct Heads {
  int64_t h, kv, dh;
};
Heads local_heads(const Attrs& a, int64_t d, const Shape& w_out) {
  const int64_t h = a.i("heads"), kv = a.i("kv_heads"), dh = d / h;
  int64_t hl = h;
  if (w_out.rank() == 2 && dh > 0 && w_out[1] % dh == 0) {
    const int64_t c = w_out[1] / dh;
    if (c > 0 && h % c == 0 && kv % (h / c) == 0) hl = c;
  }
  return {hl, kv * hl / h, dh};
}

void attention_cuda(const CudaCtx& c, const Attrs& a, Span in, Span out) {
  bool bias = a.b("bias");
  int w_in = 1, b_in = bias ? 2 : -1, w_out = bias ? 3 : 2, b_out = bias ? 4 : -1;
  int64_t B = in[0].shape()[0], T = in[0].shape()[1], d = in[0].shape()[2];
  const Heads hs = local_heads(a, d, in[static_cast<size_t>(w_out)].shape());
  const int64_t h = hs.h, kv = hs.kv, dc = h * hs.dh;  // q heads, kv heads, context features of this call
  int64_t rows = (h + 2 * kv) * hs.dh;  // in_proj_weight's: q, k and v heads
  DType t = out[0].dtype();
  if (out[kOutLse].dtype() != DType::f32)
    throw InternalError("attention on CUDA keeps lse in f32, got " + std::string(dtype_name(out[kOutLse].dtype())));
  size_t at = 0;  // 16-bit values: the f32 projections through their 16-bit copies (param_operand)
  auto ptr = [&](int i) -> const void* {
    return i < 0 ? nullptr : param_operand(c, t, in[static_cast<size_t>(i)], &at);
  };
  double p = c.training ? a.f("dropout") : 0.0;
  // 1. qkv = x W_in^T + b_in;  2. rope on q, k and the core per (sample, head);  3. y = context W_out^T + b_out
  cu::linear(c, t, in[0].raw(), ptr(w_in), ptr(b_in), out[kOutQkv].raw(), B * T, d, rows);
  cu::attention_gqa_forward(c, t, out[kOutQkv].raw(), out[kOutContext].raw(), out[kOutLse].raw(), B, T, dc, h, kv,
                            a.f("rope_theta"), a.b("causal"), p, c.rng_key, static_cast<uint64_t>(c.batch_offset * h * T * T));
  cu::linear(c, t, out[kOutContext].raw(), ptr(w_out), ptr(b_out), out[kOutY].raw(), B * T, dc, d);
}
size_t attention_ws(const Attrs& a, std::span<const TensorDesc> in, std::span<const TensorDesc>) {
  const Heads hs = local_heads(a, in[0].shape[2], in[a.b("bias") ? 3 : 2].shape);
  return cu::attention_gqa_forward_workspace(in[0].dtype, in[0].shape[0], in[0].shape[1], hs.h * hs.dh, hs.h, hs.kv);
}

// attention_grad(dcontext (B, T, h dh), qkv (B, T, (h + 2 kv) dh), context, lse (B, h, T)): its heads from the shapes
// (all of them, or a device's share under the `heads` split), as the CPU's grad_dims.
Heads grad_heads(const Shape& dcontext, const Shape& qkv, const Shape& lse) {
  const int64_t h = lse[1], dh = dcontext[2] / h;
  return {h, (qkv[2] / dh - h) / 2, dh};
}

void attention_grad_cuda(const CudaCtx& c, const Attrs& a, Span in, Span out) {
  const Shape& s = in[0].shape();
  const Heads hs = grad_heads(s, in[1].shape(), in[3].shape());
  cu::attention_gqa_backward(c, out[0].dtype(), in[0].raw(), in[1].raw(), in[2].raw(), in[3].raw(), out[0].raw(), s[0],
                             s[1], s[2], hs.h, hs.kv, a.f("rope_theta"), a.b("causal"), a.f("dropout"), c.rng_key,
                             static_cast<uint64_t>(c.batch_offset * hs.h * s[1] * s[1]));
}
size_t attention_grad_ws(const Attrs&, std::span<const TensorDesc> in, std::span<const TensorDesc>) {
  const Heads hs = grad_heads(in[0].shape, in[1].shape, in[3].shape);
  return cu::attention_gqa_backward_workspace(in[0].dtype, in[0].shape[0], in[0].shape[1], in[0].shape[2], hs.h, hs.kv);
}

}  // namespace

std::vector<Entry> dense_entries() {
  return {
      {"add", nary_cuda<false>, nullptr},
      {"mul", nary_cuda<true>, nullptr},
      {"reduce_like", reduce_like_cuda, nullptr},
      {"ones_like", ones_like_cuda, nullptr},
      {"cast", cast_cuda, nullptr},
      {"dropout", dropout_cuda, nullptr},
      {"dropout_grad", dropout_cuda, nullptr},
      {"layer_norm", layer_norm_cuda, nullptr},
      {"layer_norm_grad", layer_norm_grad_cuda, layer_norm_grad_ws},
      {"rms_norm", rms_norm_cuda, nullptr},
      {"rms_norm_grad", rms_norm_grad_cuda, rms_norm_grad_ws},
      {"softmax", softmax_cuda, nullptr},
      {"softmax_grad", softmax_grad_cuda, nullptr},
      {"cross_entropy", cross_entropy_cuda, rows_ws},
      {"cross_entropy_grad", cross_entropy_grad_cuda, nullptr},
      {"mse_loss", mse_cuda, mse_ws},
      {"mse_loss_grad", mse_grad_cuda, nullptr},
      {"accuracy", accuracy_cuda, rows_ws},
      {"concat", concat_cuda, nullptr},
      {"slice", slice_cuda, nullptr},
      {"flatten", copy_cuda, nullptr},
      {"reshape", copy_cuda, nullptr},
      {"transpose", transpose_cuda, nullptr},
      {"linear", linear_cuda, nullptr, 0b1},
      {"linear_dx", linear_dx_cuda, nullptr, 0b1},
      {"linear_dw", linear_dw_cuda, nullptr, 0b11},
      {"linear_db", linear_db_cuda, linear_db_ws},
      {"embedding", embedding_cuda, nullptr},
      {"embedding_dw", embedding_dw_cuda, embedding_dw_ws},
      {"position_embedding", position_cuda, nullptr},
      {"position_embedding_dw", position_dw_cuda, nullptr},
      {"attention", attention_cuda, attention_ws},
      {"attention_grad", attention_grad_cuda, attention_grad_ws},
  };
}

std::vector<std::pair<CudaKernel, CudaKernel>> activation_kernels() {
#define BRAID_ACT_KERNELS(K, ...) {act_cuda<cu::Act::K>, act_grad_cuda<cu::Act::K>},
  return {BRAID_ACTIVATIONS(BRAID_ACT_KERNELS)};
#undef BRAID_ACT_KERNELS
}

}  // namespace braid::ops::cuda_table

namespace braid::ops {

bool cuda_linear_gelu(const CudaCtx& c, std::span<const Tensor> in, const Tensor& h, const Tensor& y) {
  if (in.size() != 3 || h.dtype() != y.dtype()) return false;
  const int64_t fout = in[1].shape()[0], fin = in[1].shape()[1];
  const DType t = h.dtype();
  size_t at = 0;
  const void* w = cuda_table::param_operand(c, t, in[1], &at);
  const void* b = cuda_table::param_operand(c, t, in[2], &at);
  return cuda::linear_gelu(c, t, in[0].raw(), w, b, h.raw(), y.raw(), in[0].numel() / fin, fin, fout);
}

}  // namespace braid::ops
