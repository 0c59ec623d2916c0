// 2-D pooling of NCHW input with PyTorch's semantics (ceil_mode false, dilation 1): max_pool2d (padding acts
// as -inf; ties and NaN resolved like PyTorch's CPU kernel: the first maximum wins, NaN propagates),
// avg_pool2d (count_include_pad true: every window divides by kh kw), global_avg_pool ([B, C, H, W] ->
// [B, C], mean over H and W), and their gradient ops. stride defaults to kernel; padding is at most half the
// kernel (PyTorch's rule), so every window holds at least one real pixel. max_pool2d saves the argmax of each
// window (flat index h W + w within its plane, i64, as PyTorch's return_indices) as a second output.
// Float avg_pool2d and its gradient run on oneDNN's pooling primitives where braid is built with it, unless
// BRAID_POOL=loops (ops/cpu/onednn_spatial.h). max_pool2d stays on the loops: oneDNN's max pooling does not
// propagate NaN (PyTorch's does), and its workspace is not PyTorch's argmax.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/cpu_isa.h"
#include "ops/cpu/kernel_util.h"
#include "ops/cpu/onednn_spatial.h"
#include "ops/defs/spatial_util.h"
#include "ops/registry.h"

namespace braid::ops {
namespace {

using cpu::dispatch_float;
using spatial::pair_str;
using spatial::Window;

void pool_canonicalize(Attrs& a) {
  if (!a.has("stride")) a.set("stride", a.ints("kernel"));
}

Window pool_window(const std::string& op, const Attrs& a, const TensorDesc& x) {
  const auto &k = a.ints("kernel"), &p = a.ints("padding");
  if (2 * p[0] > k[0] || 2 * p[1] > k[1])
    throw OpError("padding " + pair_str(p) + " must be at most half of kernel " + pair_str(k),
                  "PyTorch's rule for pooling windows; use less padding or a larger kernel");
  return spatial::window_of(op, a, x);
}

// Planes (one (b, c) pair each) per parallel chunk, so that a chunk does about 16k window reads.
int64_t plane_grain(const Window& w) {
  return std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(1, w.out_plane() * w.k()));
}

std::vector<SplitSignature> plane_splits(std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
  auto sigs = all_broadcast(in, out);
  // Every (sample, channel) plane is pooled on its own: split the batch or the channels.
  sigs.push_back({"data", std::vector<Sbp>(in.size(), Sbp::S(0)), std::vector<Sbp>(out.size(), Sbp::S(0))});
  sigs.push_back({"channel", std::vector<Sbp>(in.size(), Sbp::S(1)), std::vector<Sbp>(out.size(), Sbp::S(1))});
  return sigs;
}
std::vector<SplitSignature> pool_splits(const Attrs&, std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
  return plane_splits(in, out);
}

Cost window_cost(const Window& w, std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
  Cost c = default_cost(in, out, 0);
  c.flops = static_cast<double>(w.B * w.C * w.out_plane() * w.k());
  return c;
}

// ---- max_pool2d: x -> (y, argmax) ---------------------------------------------------------------------------
std::vector<TensorDesc> infer_max_pool(const Attrs& a, std::span<const TensorDesc> in) {
  Window w = pool_window("max_pool2d", a, in[0]);
  Shape s{w.B, w.C, w.Ho, w.Wo};
  return {TensorDesc{s, in[0].dtype}, TensorDesc{s, DType::i64}};
}

// A block of output rows of the common 2x2, stride 2, unpadded float max pool: output j's window starts at input
// off[j] of the block (x: the block's first input row; `base`: that row's index in its plane, added to the argmax),
// the four candidates read in window order, each taken when greater than the maximum so far or NaN (the generic
// loop's choices, and PyTorch's: the first maximum, the last NaN). Branch-free over the whole block with 32-bit
// offsets, compiled per vector width: a loop per output row had left LeNet's short rows (12 and 4 outputs) to
// scalar remainders, 12% of its step (docs/benchmarks.md).
void max_pool_2x2_rows(const float* __restrict x, const int32_t* __restrict off, int64_t n, int32_t W, int64_t base,
                       float* __restrict y, int64_t* __restrict arg) {
  for (int64_t j = 0; j < n; ++j) {
    const int32_t o = off[j];
    const float a = x[o], b = x[o + 1], d = x[o + W], e = x[o + W + 1];
    float m = -std::numeric_limits<float>::infinity();
    int32_t best = o;
    bool t = a > m || a != a;
    m = t ? a : m;
    best = t ? o : best;
    t = b > m || b != b;
    m = t ? b : m;
    best = t ? o + 1 : best;
    t = d > m || d != d;
    m = t ? d : m;
    best = t ? o + W : best;
    t = e > m || e != e;
    m = t ? e : m;
    best = t ? o + W + 1 : best;
    y[j] = m;
    arg[j] = base + best;
  }
}

// Outputs per block of max_pool_2x2_rows (its table of window offsets lives on the stack): whole planes where they
// fit, else blocks of rows.
constexpr int64_t kMaxPoolTable = 4096;

void max_pool_cpu(const KernelCtx&, const Attrs& a, std::span<const Tensor> in, std::span<const Tensor> out) {
  Window w = pool_window("max_pool2d", a, in[0].desc());
  if (out[0].dtype() == DType::f32 && w.kh == 2 && w.kw == 2 && w.sh == 2 && w.sw == 2 && w.ph == 0 && w.pw == 0 &&
      w.Ho > 0 && w.Wo > 0 && w.Wo <= kMaxPoolTable) {
    const float* x = in[0].data<float>();
    float* y = out[0].data<float>();
    int64_t* arg = out[1].data<int64_t>();
    const int64_t rows = std::min<int64_t>(w.Ho, kMaxPoolTable / w.Wo);  // output rows per block
    int32_t off[kMaxPoolTable];
    for (int64_t oh = 0; oh < rows; ++oh)
      for (int64_t ow = 0; ow < w.Wo; ++ow) off[oh * w.Wo + ow] = static_cast<int32_t>(2 * oh * w.W + 2 * ow);
    const int32_t W = static_cast<int32_t>(w.W);
    parallel_for(w.B * w.C, plane_grain(w), [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p)
        for (int64_t oh = 0; oh < w.Ho; oh += rows) {
          const int64_t o = p * w.out_plane() + oh * w.Wo;
          cpu_vec([&] {
            max_pool_2x2_rows(x + p * w.in_plane() + 2 * oh * w.W, off, std::min(rows, w.Ho - oh) * w.Wo, W,
                              2 * oh * w.W, y + o, arg + o);
          });
        }
    });
    return;
  }
  dispatch_float(out[0].dtype(), [&]<typename T>() {
    const T* x = in[0].data<T>();
    T* y = out[0].data<T>();
    int64_t* arg = out[1].data<int64_t>();
    parallel_for(w.B * w.C, plane_grain(w), [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        const T* xp = x + p * w.in_plane();
        for (int64_t oh = 0; oh < w.Ho; ++oh)
          for (int64_t ow = 0; ow < w.Wo; ++ow) {
            int64_t h0 = oh * w.sh - w.ph, w0 = ow * w.sw - w.pw;
            int64_t hs = std::max<int64_t>(h0, 0), he = std::min(h0 + w.kh, w.H);
            int64_t ws = std::max<int64_t>(w0, 0), we = std::min(w0 + w.kw, w.W);
            T m = -std::numeric_limits<T>::infinity();
            int64_t best = hs * w.W + ws;
            for (int64_t h = hs; h < he; ++h)
              for (int64_t ww = ws; ww < we; ++ww) {
                T v = xp[h * w.W + ww];
                if (v > m || std::isnan(v)) {
                  m = v;
                  best = h * w.W + ww;
                }
              }
            int64_t o = p * w.out_plane() + oh * w.Wo + ow;
            y[o] = m;
            arg[o] = best;
          }
      }
    });
  });
}

void max_pool_grad(GradCtx& c) {
  if (c.dout[0].valid() && c.needs[0])
    c.din[0] = c.g.emit("max_pool2d_grad", c.attrs, {c.dout[0], c.outputs[1], c.inputs[0]})[0];
}

// ---- max_pool2d_grad(dy, argmax, x) -> dx: dy routed to each window's argmax ----------------------------
std::vector<TensorDesc> infer_max_pool_grad(const Attrs& a, std::span<const TensorDesc> in) {
  Window w = pool_window("max_pool2d", a, in[2]);
  BRAID_ASSERT(in[0].shape == (Shape{w.B, w.C, w.Ho, w.Wo}) && in[1].shape == in[0].shape, "max_pool2d_grad: dy ",
               in[0].str(), ", argmax ", in[1].str(), " for x ", in[2].str());
  return {in[2]};
}

void max_pool_grad_cpu(const KernelCtx&, const Attrs& a, std::span<const Tensor> in, std::span<const Tensor> out) {
  Window w = pool_window("max_pool2d", a, in[2].desc());
  const Tensor& arg = in[1];
  dispatch_float(out[0].dtype(), [&]<typename T>() {
    const T* dy = in[0].data<T>();
    T* dx = out[0].data<T>();
    parallel_for(w.B * w.C, plane_grain(w), [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {  // each chunk owns whole planes: no races, fixed order
        T* dxp = dx + p * w.in_plane();
        for (int64_t e = 0; e < w.in_plane(); ++e) dxp[e] = T(0);
        for (int64_t e = 0; e < w.out_plane(); ++e) {
          int64_t o = p * w.out_plane() + e;
          int64_t idx = cpu::int_at(arg, o);
          BRAID_ASSERT(idx >= 0 && idx < w.in_plane(), "max_pool2d argmax ", idx, " outside its plane");
          dxp[idx] += dy[o];
        }
      }
    });
  });
}

Cost max_pool_grad_cost(const Attrs&, std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
  Cost c = default_cost(in, out, 0);
  c.flops = static_cast<double>(in[0].numel());
  return c;
}

// ---- avg_pool2d -----------------------------------------------------------------------------------------
std::vector<TensorDesc> infer_avg_pool(const Attrs& a, std::span<const TensorDesc> in) {
  Window w = pool_window("avg_pool2d", a, in[0]);
  return {TensorDesc{Shape{w.B, w.C, w.Ho, w.Wo}, in[0].dtype}};
}

#ifdef BRAID_HAVE_ONEDNN
cpu::SpatialShape spatial_shape(const Window& w) {
  cpu::SpatialShape s;
  s.B = w.B, s.C = w.C, s.H = w.H, s.W = w.W;
  s.kh = w.kh, s.kw = w.kw, s.sh = w.sh, s.sw = w.sw, s.ph = w.ph, s.pw = w.pw, s.Ho = w.Ho, s.Wo = w.Wo;
  return s;
}

// Whether an avg_pool2d pass of this dtype and window runs on oneDNN: float, BRAID_POOL not loops, and a
// primitive for the shape (onednn_workspace).
bool on_onednn(DType t, cpu::SpatialPass pass, const Window& w) {
  return t == DType::f32 && cpu::pool_impl() == cpu::PoolImpl::OneDnn &&
         cpu::onednn_workspace(pass, spatial_shape(w)).has_value();
}
#endif

// The loops need no scratch; oneDNN's pooling may want a scratchpad.
size_t avg_workspace(cpu::SpatialPass pass, const Attrs& a, const TensorDesc& x) {
  (void)cpu::pool_impl();  // read at plan time in every build: BRAID_POOL=onednn without oneDNN warns
#ifdef BRAID_HAVE_ONEDNN
  const Window w = pool_window("avg_pool2d", a, x);
  if (on_onednn(x.dtype, pass, w)) return *cpu::onednn_workspace(pass, spatial_shape(w));
#else
  (void)pass, (void)a, (void)x;
#endif
  return 0;
}

size_t avg_pool_workspace(const Attrs& a, std::span<const TensorDesc> in, std::span<const TensorDesc>) {
  return avg_workspace(cpu::SpatialPass::AvgPoolForward, a, in[0]);
}

// y = (sum of the window's real pixels) / (kh kw): padding counts as zeros (count_include_pad).
void avg_pool_cpu(const KernelCtx& ctx, const Attrs& a, std::span<const Tensor> in, std::span<const Tensor> out) {
  Window w = pool_window("avg_pool2d", a, in[0].desc());
#ifdef BRAID_HAVE_ONEDNN
  if (on_onednn(out[0].dtype(), cpu::SpatialPass::AvgPoolForward, w))
    return cpu::onednn_avg_pool_forward(spatial_shape(w), in[0].data<float>(), out[0].data<float>(), ctx.workspace,
                                        ctx.workspace_bytes);
#else
  (void)ctx;
#endif
  dispatch_float(out[0].dtype(), [&]<typename T>() {
    const T* x = in[0].data<T>();
    T* y = out[0].data<T>();
    const T div = static_cast<T>(w.k());
    parallel_for(w.B * w.C, plane_grain(w), [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        const T* xp = x + p * w.in_plane();
        for (int64_t oh = 0; oh < w.Ho; ++oh)
          for (int64_t ow = 0; ow < w.Wo; ++ow) {
            int64_t h0 = oh * w.sh - w.ph, w0 = ow * w.sw - w.pw;
            T acc = 0;
            for (int64_t h = std::max<int64_t>(h0, 0); h < std::min(h0 + w.kh, w.H); ++h)
              for (int64_t ww = std::max<int64_t>(w0, 0); ww < std::min(w0 + w.kw, w.W); ++ww) acc += xp[h * w.W + ww];
            y[p * w.out_plane() + oh * w.Wo + ow] = acc / div;
          }
      }
    });
  });
}

void avg_pool_grad(GradCtx& c) {
  if (c.dout[0].valid() && c.needs[0]) c.din[0] = c.g.emit("avg_pool2d_grad", c.attrs, {c.dout[0], c.inputs[0]})[0];
}

// ---- avg_pool2d_grad(dy, x) -> dx: each window's dy / (kh kw) spread over its real pixels -------------------
std::vector<TensorDesc> infer_avg_pool_grad(const Attrs& a, std::span<const TensorDesc> in) {
  Window w = pool_window("avg_pool2d", a, in[1]);
  BRAID_ASSERT(in[0].shape == (Shape{w.B, w.C, w.Ho, w.Wo}), "avg_pool2d_grad: dy ", in[0].str(), " for x ",
               in[1].str());
  return {in[1]};
}

size_t avg_pool_grad_workspace(const Attrs& a, std::span<const TensorDesc> in, std::span<const TensorDesc>) {
  return avg_workspace(cpu::SpatialPass::AvgPoolBackward, a, in[1]);
}

void avg_pool_grad_cpu(const KernelCtx& ctx, const Attrs& a, std::span<const Tensor> in, std::span<const Tensor> out) {
  Window w = pool_window("avg_pool2d", a, in[1].desc());
#ifdef BRAID_HAVE_ONEDNN
  if (on_onednn(out[0].dtype(), cpu::SpatialPass::AvgPoolBackward, w))
    return cpu::onednn_avg_pool_backward(spatial_shape(w), in[0].data<float>(), out[0].data<float>(), ctx.workspace,
                                         ctx.workspace_bytes);
#else
  (void)ctx;
#endif
  dispatch_float(out[0].dtype(), [&]<typename T>() {
    const T* dy = in[0].data<T>();
    T* dx = out[0].data<T>();
    const T div = static_cast<T>(w.k());
    parallel_for(w.B * w.C, plane_grain(w), [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        T* dxp = dx + p * w.in_plane();
        for (int64_t e = 0; e < w.in_plane(); ++e) dxp[e] = T(0);
        for (int64_t oh = 0; oh < w.Ho; ++oh)
          for (int64_t ow = 0; ow < w.Wo; ++ow) {
            int64_t h0 = oh * w.sh - w.ph, w0 = ow * w.sw - w.pw;
            T g = dy[p * w.out_plane() + oh * w.Wo + ow] / div;
            for (int64_t h = std::max<int64_t>(h0, 0); h < std::min(h0 + w.kh, w.H); ++h)
              for (int64_t ww = std::max<int64_t>(w0, 0); ww < std::min(w0 + w.kw, w.W); ++ww) dxp[h * w.W + ww] += g;
          }
      }
    });
  });
}

Cost max_pool_cost(const Attrs& a, std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
  return window_cost(pool_window("max_pool2d", a, in[0]), in, out);
}
Cost avg_pool_cost(const Attrs& a, std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
  return window_cost(pool_window("avg_pool2d", a, in[0]), in, out);
}
Cost avg_pool_grad_cost(const Attrs& a, std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
  return window_cost(pool_window("avg_pool2d", a, in[1]), in, out);
}

Attrs pool_attrs(std::vector<int64_t> kernel, std::vector<int64_t> stride, std::vector<int64_t> padding) {
  return {{"kernel", kernel}, {"stride", stride}, {"padding", padding}};
}

// Uniform values: ties within a window (which would make max_pool2d's finite differences jump) have
// probability ~0 at these sizes.
std::vector<Sample> pool_samples() {
  return {
      {"k2", {{"kernel", int64_t{2}}}, {{TensorDesc{Shape{2, 3, 6, 6}}}}},
      {"k3_stride2_pad1", pool_attrs({3, 3}, {2, 2}, {1, 1}), {{TensorDesc{Shape{2, 2, 7, 7}}}}},
      {"nonsquare_stride1_pad", pool_attrs({2, 3}, {1, 1}, {1, 1}), {{TensorDesc{Shape{2, 2, 5, 6}}}}},
      {"stride_over_kernel", {{"kernel", int64_t{2}}, {"stride", int64_t{3}}}, {{TensorDesc{Shape{2, 1, 7, 8}}}}},
  };
}

BadSample rank_bad(const std::string& op) {
  return {"flat_samples",
          {{"kernel", int64_t{2}}},
          {TensorDesc{Shape{4, 3, 32}}},
          op + " needs [C, H, W] samples, got [3, 32]"};
}
std::vector<BadSample> max_pool_bad() {
  return {rank_bad("max_pool2d"),
          {"pad_over_half",
           pool_attrs({2, 2}, {2, 2}, {2, 0}),
           {TensorDesc{Shape{2, 1, 8, 8}}},
           "padding [2, 0] must be at most half of kernel [2, 2]"},
          {"kernel_too_big",
           {{"kernel", int64_t{5}}},
           {TensorDesc{Shape{2, 3, 3, 3}}},
           "kernel [5, 5] is larger than the padded input"},
          {"int_input", {{"kernel", int64_t{2}}}, {TensorDesc{Shape{2, 1, 8, 8}, DType::i64}}, "floating point"}};
}
std::vector<BadSample> avg_pool_bad() {
  auto v = max_pool_bad();
  v[0] = rank_bad("avg_pool2d");
  return v;
}

// ---- global_avg_pool: [B, C, H, W] -> [B, C] ----------------------------------------------------------------
std::vector<TensorDesc> infer_global(const Attrs&, std::span<const TensorDesc> in) {
  spatial::require_chw("global_avg_pool", in[0]);
  return {TensorDesc{Shape{in[0].shape[0], in[0].shape[1]}, in[0].dtype}};
}

void global_cpu(const KernelCtx&, const Attrs&, std::span<const Tensor> in, std::span<const Tensor> out) {
  int64_t planes = out[0].numel(), n = in[0].numel() / std::max<int64_t>(1, planes);
  dispatch_float(out[0].dtype(), [&]<typename T>() {
    const T* x = in[0].data<T>();
    T* y = out[0].data<T>();
    parallel_for(planes, std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(1, n)), [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        double acc = 0;  // fixed order, double accumulator
        for (int64_t e = 0; e < n; ++e) acc += x[p * n + e];
        y[p] = static_cast<T>(acc / static_cast<double>(n));
      }
    });
  });
}

Cost global_cost(const Attrs&, std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
  Cost c = default_cost(in, out, 0);
  c.flops = static_cast<double>(in[0].numel());
  return c;
}

std::vector<TensorDesc> infer_global_grad(const Attrs&, std::span<const TensorDesc> in) {
  BRAID_ASSERT(in[1].shape.rank() == 4 && in[0].shape == (Shape{in[1].shape[0], in[1].shape[1]}),
               "global_avg_pool_grad: dy ", in[0].str(), " for x ", in[1].str());
  return {in[1]};
}

void global_grad(GradCtx& c) {
  if (c.dout[0].valid() && c.needs[0]) c.din[0] = c.g.emit("global_avg_pool_grad", {}, {c.dout[0], c.inputs[0]})[0];
}

// global_avg_pool_grad(dy [B, C], x) -> dx = dy / (H W) on every pixel
void global_grad_cpu(const KernelCtx&, const Attrs&, std::span<const Tensor> in, std::span<const Tensor> out) {
  int64_t planes = in[0].numel(), n = out[0].numel() / std::max<int64_t>(1, planes);
  dispatch_float(out[0].dtype(), [&]<typename T>() {
    const T* dy = in[0].data<T>();
    T* dx = out[0].data<T>();
    const T div = static_cast<T>(n);
    parallel_for(planes, std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(1, n)), [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p)
        for (int64_t e = 0; e < n; ++e) dx[p * n + e] = dy[p] / div;
    });
  });
}

std::vector<Sample> global_samples() {
  return {{"4x5", {}, {{TensorDesc{Shape{2, 3, 4, 5}}}}}, {"1x1", {}, {{TensorDesc{Shape{3, 2, 1, 1}}}}}};
}
std::vector<BadSample> global_bad() {
  return {{"flat_samples", {}, {TensorDesc{Shape{2, 10}}}, "global_avg_pool needs [C, H, W] samples, got [10]"},
          {"int_input", {}, {TensorDesc{Shape{2, 3, 4, 4}, DType::i32}}, "floating point"}};
}

std::vector<AttrSpec> pool_attr_specs() {
  AttrSpec stride = spatial::pair_attr("stride", std::nullopt, true, "stride: n or [sh, sw]; defaults to kernel");
  stride.optional = true;
  return {spatial::pair_attr("kernel", std::nullopt, true, "window size: n or [kh, kw]"), stride,
          spatial::pair_attr("padding", 0, false, "padding on each side, at most half the kernel: n or [ph, pw]")};
}

OpDef internal_def(const std::string& name, std::string doc, int n_in, InferFn infer, CpuKernel k) {
  OpDef d = internal_op(name, std::move(doc), n_in);
  d.infer = infer;
  d.cpu = k;
  d.splits = pool_splits;
  return d;
}

}  // namespace

void register_pool(Registry& r) {
  {
    OpDef d;
    d.name = "max_pool2d";
    d.doc = "2-D max pooling of [C, H, W] samples (torch.nn.MaxPool2d); saves the argmax for backward";
    d.attrs = pool_attr_specs();
    d.canonicalize = pool_canonicalize;
    d.public_outputs = 1;
    d.infer = infer_max_pool;
    d.grad = max_pool_grad;
    d.splits = pool_splits;
    d.cost = max_pool_cost;
    d.samples = pool_samples;
    d.bad_samples = max_pool_bad;
    d.cpu = max_pool_cpu;
    // The forward is a selection (exact); dx sums the dy of overlapping windows, maybe in another order.
    d.torch_rtol = 1e-6;
    d.torch_atol = 1e-7;
    r.add(d);
  }
  {
    OpDef d;
    d.name = "avg_pool2d";
    d.doc = "2-D average pooling of [C, H, W] samples (torch.nn.AvgPool2d, count_include_pad=True)";
    d.attrs = pool_attr_specs();
    d.canonicalize = pool_canonicalize;
    d.infer = infer_avg_pool;
    d.grad = avg_pool_grad;
    d.splits = pool_splits;
    d.cost = avg_pool_cost;
    d.samples = pool_samples;
    d.bad_samples = avg_pool_bad;
    d.workspace = avg_pool_workspace;
    d.cpu = avg_pool_cpu;
    r.add(d);
  }
  {
    OpDef d;
    d.name = "global_avg_pool";
    d.doc = "mean over height and width: [C, H, W] samples -> [C] (adaptive_avg_pool2d(x, 1) flattened)";
    d.infer = infer_global;
    d.grad = global_grad;
    d.splits = pool_splits;
    d.cost = global_cost;
    d.samples = global_samples;
    d.bad_samples = global_bad;
    d.cpu = global_cpu;
    r.add(d);
  }
  {
    OpDef d = internal_def("max_pool2d_grad", "gradient of max_pool2d: (dy, argmax, x) -> dx", 3, infer_max_pool_grad,
                           max_pool_grad_cpu);
    d.attrs = pool_attr_specs();
    d.canonicalize = pool_canonicalize;
    d.cost = max_pool_grad_cost;
    r.add(d);
  }
  {
    OpDef d = internal_def("avg_pool2d_grad", "gradient of avg_pool2d: (dy, x) -> dx", 2, infer_avg_pool_grad,
                           avg_pool_grad_cpu);
    d.attrs = pool_attr_specs();
    d.canonicalize = pool_canonicalize;
    d.cost = avg_pool_grad_cost;
    d.workspace = avg_pool_grad_workspace;
    r.add(d);
  }
  r.add(internal_def("global_avg_pool_grad", "gradient of global_avg_pool: (dy [B, C], x) -> dx", 2, infer_global_grad,
                     global_grad_cpu));
}

}  // namespace braid::ops
