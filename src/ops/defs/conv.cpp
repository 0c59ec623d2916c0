// conv2d: 2-D convolution of NCHW input like torch.nn.Conv2d (groups 1, dilation 1, zero padding), by
// im2col + GEMM over groups of samples; and its gradient ops: conv2d_grad_input (GEMM + col2im),
// conv2d_grad_weight (GEMM accumulated over the groups) and conv2d_grad_bias (sum over batch and space).
// Weight [out, C, kh, kw], bias [out]; both start uniform(-1/sqrt(C kh kw), +1/sqrt(C kh kw)) as in PyTorch.
// A group of G samples (G from the shapes alone, so results never depend on the thread count) is one column
// matrix [C kh kw, G Ho Wo] and one GEMM; with dy / y gathered to [out, G Ho Wo] beside it. Both live in
// scratch from OpDef::workspace: kernels never allocate. Each group runs as few OpenMP regions as possible
// (im2col over sample x channel, one GEMM, one gather/scatter), which matters on small images.
// Float conv2d, conv2d_grad_input and conv2d_grad_weight run on oneDNN's convolution primitives instead where
// braid is built with oneDNN, unless BRAID_CONV=im2col (ops/cpu/onednn_spatial.h); double always runs here.
#include <algorithm>
#include <cmath>

#include "core/cpu_isa.h"
#include "ops/cpu/fused.h"
#include "ops/cpu/kernel_util.h"
#include "ops/cpu/onednn_spatial.h"
#include "ops/defs/spatial_util.h"
#include "ops/registry.h"

namespace braid::ops {
namespace {

using cpu::dispatch_float;
using spatial::pair_str;
using spatial::per_sample;
using spatial::Window;

Window conv_window(const Attrs& a, const TensorDesc& x) { return spatial::window_of("conv2d", a, x); }

// Bytes of scratch a group's matrices may take: big enough for wide GEMMs, small enough to stay in cache.
constexpr int64_t kGroupBytes = int64_t{2} << 20;

// Samples per group: G such that the column matrix [K, G P] and the [O, G P] matrix fit kGroupBytes.
int64_t group_size(const Window& w, int64_t O, size_t elem) {
  int64_t per_sample =
      size_mul(size_mul(size_add(size_mul(w.C, w.k()), O), w.out_plane()), static_cast<int64_t>(elem));
  return std::clamp<int64_t>(kGroupBytes / std::max<int64_t>(per_sample, 1), 1, std::max<int64_t>(w.B, 1));
}

// Bytes of one group's scratch: the column matrix [K, G P] and the [O, G P] matrix.
size_t group_bytes(const Window& w, int64_t O, DType t) {
  int64_t G = group_size(w, O, dtype_size(t));
  return static_cast<size_t>(
      size_mul(size_mul(size_mul(size_add(size_mul(w.C, w.k()), O), G), w.out_plane()), static_cast<int64_t>(dtype_size(t))));
}

#ifdef BRAID_HAVE_ONEDNN
cpu::SpatialShape spatial_shape(const Window& w, int64_t O, bool bias) {
  cpu::SpatialShape s;
  s.B = w.B, s.C = w.C, s.H = w.H, s.W = w.W, s.O = O;
  s.kh = w.kh, s.kw = w.kw, s.sh = w.sh, s.sw = w.sw, s.ph = w.ph, s.pw = w.pw, s.Ho = w.Ho, s.Wo = w.Wo;
  s.bias = bias;
  return s;
}

// Whether a conv2d pass of this dtype and shape runs on oneDNN: float, BRAID_CONV not im2col, and a primitive
// for the shape (onednn_workspace; the rare shape without one runs here, as its workspace was sized).
bool on_onednn(DType t, cpu::SpatialPass pass, const cpu::SpatialShape& s) {
  return t == DType::f32 && cpu::conv_impl() == cpu::ConvImpl::OneDnn && cpu::onednn_workspace(pass, s).has_value();
}
#endif

template <typename T>
T* scratch(const KernelCtx& ctx, int64_t n) {
  BRAID_ASSERT(ctx.workspace != nullptr && ctx.workspace_bytes >= static_cast<size_t>(n) * sizeof(T),
               "conv2d workspace too small: ", ctx.workspace_bytes, " bytes for ", n, " elements");
  return static_cast<T*>(ctx.workspace);
}

// Outputs o in [lo, hi) of one axis whose input position o stride - pad + tap falls inside [0, size).
struct Span {
  int64_t lo, hi;
};
Span valid_outputs(int64_t tap, int64_t stride, int64_t pad, int64_t size, int64_t n_out) {
  int64_t lo = pad > tap ? (pad - tap + stride - 1) / stride : 0;
  int64_t top = size - 1 + pad - tap;  // largest o stride that stays inside
  int64_t hi = top >= 0 ? std::min(n_out, top / stride + 1) : 0;
  return {std::min(lo, hi), hi};
}

// x: (C, H, W) one sample, channel c -> rows (c, i, j) of col, each row holding the sample's Ho Wo entries
// at col + row * ld: x[c, oh sh - ph + i, ow sw - pw + j], zero where that falls in the padding. Row order
// matches the weight's (C, kh, kw) flattening; ld = G Ho Wo for a group (the sample's column offset is
// already in col).
template <typename T>
void im2col_channel_unpadded(const T* __restrict x, const Window& w, int64_t c, T* __restrict col, int64_t ld) {
  // Stride 1, no padding: every row of the window is inside, each output row a contiguous copy.
  for (int64_t i = 0; i < w.kh; ++i)
    for (int64_t j = 0; j < w.kw; ++j) {
      T* dst = col + ((c * w.kh + i) * w.kw + j) * ld;
      const T* src = x + (c * w.H + i) * w.W + j;
      for (int64_t oh = 0; oh < w.Ho; ++oh)
        for (int64_t ow = 0; ow < w.Wo; ++ow) dst[oh * w.Wo + ow] = src[oh * w.W + ow];
    }
}

template <typename T>
void im2col_channel(const T* x, const Window& w, int64_t c, T* col, int64_t ld) {
  if (w.sh == 1 && w.sw == 1 && w.ph == 0 && w.pw == 0)
    return cpu_vec([&] { im2col_channel_unpadded(x, w, c, col, ld); });
  for (int64_t i = 0; i < w.kh; ++i) {
    Span rows = valid_outputs(i, w.sh, w.ph, w.H, w.Ho);
    for (int64_t j = 0; j < w.kw; ++j) {
      Span cols = valid_outputs(j, w.sw, w.pw, w.W, w.Wo);
      T* dst = col + ((c * w.kh + i) * w.kw + j) * ld;
      for (int64_t oh = 0; oh < w.Ho; ++oh) {
        T* row = dst + oh * w.Wo;
        if (oh < rows.lo || oh >= rows.hi) {
          for (int64_t ow = 0; ow < w.Wo; ++ow) row[ow] = T(0);
          continue;
        }
        const T* src = x + (c * w.H + oh * w.sh - w.ph + i) * w.W - w.pw + j;  // src[ow sw] is the pixel
        for (int64_t ow = 0; ow < cols.lo; ++ow) row[ow] = T(0);
        if (w.sw == 1)
          for (int64_t ow = cols.lo; ow < cols.hi; ++ow) row[ow] = src[ow];
        else
          for (int64_t ow = cols.lo; ow < cols.hi; ++ow) row[ow] = src[ow * w.sw];
        for (int64_t ow = cols.hi; ow < w.Wo; ++ow) row[ow] = T(0);
      }
    }
  }
}

// The column matrix [C kh kw, G Ho Wo] of samples [b0, b0 + G) of x (B, C, H, W).
template <typename T>
void im2col_group(const T* x, const Window& w, int64_t b0, int64_t G, T* col) {
  const int64_t P = w.out_plane(), ld = G * P;
  parallel_for(G * w.C, std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(1, w.k() * P)), [&](int64_t q0, int64_t q1) {
    for (int64_t q = q0; q < q1; ++q) {
      const int64_t s = q / w.C, c = q % w.C;
      im2col_channel(x + (b0 + s) * w.C * w.in_plane(), w, c, col + s * P, ld);
    }
  });
}

// The adjoint of im2col for samples [b0, b0 + G): dx = 0, then every column entry is added back to its
// pixel. Each (sample, channel) plane is owned by one chunk and added in a fixed order, so the result does
// not depend on the thread count.
template <typename T>
void col2im_group(const T* col, const Window& w, int64_t b0, int64_t G, T* x) {
  const int64_t P = w.out_plane(), ld = G * P;
  parallel_for(G * w.C, std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(1, w.k() * P)), [&](int64_t q0, int64_t q1) {
    for (int64_t q = q0; q < q1; ++q) {
      const int64_t s = q / w.C, c = q % w.C;
      T* plane = x + ((b0 + s) * w.C + c) * w.in_plane();
      const T* scol = col + s * P;
      for (int64_t e = 0; e < w.in_plane(); ++e) plane[e] = T(0);
      for (int64_t i = 0; i < w.kh; ++i) {
        Span rows = valid_outputs(i, w.sh, w.ph, w.H, w.Ho);
        for (int64_t j = 0; j < w.kw; ++j) {
          Span cols = valid_outputs(j, w.sw, w.pw, w.W, w.Wo);
          const T* src = scol + ((c * w.kh + i) * w.kw + j) * ld;
          for (int64_t oh = rows.lo; oh < rows.hi; ++oh) {
            T* dst = plane + (oh * w.sh - w.ph + i) * w.W - w.pw + j;  // dst[ow sw] is the pixel
            const T* row = src + oh * w.Wo;
            if (w.sw == 1)
              for (int64_t ow = cols.lo; ow < cols.hi; ++ow) dst[ow] += row[ow];
            else
              for (int64_t ow = cols.lo; ow < cols.hi; ++ow) dst[ow * w.sw] += row[ow];
          }
        }
      }
    }
  });
}

// dy (B, O, P) samples [b0, b0 + G) -> m (O, G P) (gather), or the reverse (scatter, adding bias[o] when given).
template <typename T>
void gather_group(const T* dy, int64_t O, int64_t P, int64_t b0, int64_t G, T* m) {
  parallel_for(O, std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(1, G * P)), [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o)
      for (int64_t s = 0; s < G; ++s) std::copy_n(dy + ((b0 + s) * O + o) * P, P, m + (o * G + s) * P);
  });
}
template <typename T>
void scatter_group(const T* m, const T* bias, int64_t O, int64_t P, int64_t b0, int64_t G, T* y) {
  parallel_for(O, std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(1, G * P)), [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o)
      for (int64_t s = 0; s < G; ++s) {
        const T* src = m + (o * G + s) * P;
        T* dst = y + ((b0 + s) * O + o) * P;
        if (bias)
          for (int64_t e = 0; e < P; ++e) dst[e] = src[e] + bias[o];
        else
          std::copy_n(src, P, dst);
      }
  });
}

// ---- conv2d ---------------------------------------------------------------------------------------------
std::vector<ParamSpec> conv_params(const Attrs& a, std::span<const TensorDesc> data) {
  Window w = conv_window(a, data[0]);
  int64_t out = a.i("out");
  double bound = 1.0 / std::sqrt(static_cast<double>(w.C * w.k()));  // kaiming_uniform(a=sqrt(5)) = 1/sqrt(fan_in)
  std::vector<ParamSpec> ps{
      {"weight", TensorDesc{Shape{out, w.C, w.kh, w.kw}, data[0].dtype}, InitSpec::uniform(-bound, bound)}};
  if (a.b("bias")) ps.push_back({"bias", TensorDesc{Shape{out}, data[0].dtype}, InitSpec::uniform(-bound, bound)});
  return ps;
}

std::vector<TensorDesc> infer_conv(const Attrs& a, std::span<const TensorDesc> in) {
  const TensorDesc& x = in[0];
  Window w = conv_window(a, x);
  size_t want = a.b("bias") ? 3 : 2;
  if (in.size() != want)
    throw OpError("conv2d with bias=" + std::string(a.b("bias") ? "true" : "false") + " takes " + std::to_string(want) +
                  " tensors (input, weight" + (want == 3 ? ", bias" : "") + "), got " + std::to_string(in.size()));
  const TensorDesc& wt = in[1];
  if (wt.shape.rank() == 4 && wt.shape[1] != w.C)
    throw OpError("input has " + std::to_string(w.C) + " channels but weight expects " + std::to_string(wt.shape[1]) +
                      " (per-sample input " + per_sample(x.shape).str() + ", weight " + wt.shape.str() + ")",
                  "the weight is [out, C, kh, kw]; C is the channel count of the layer's input");
  // The output channels come from the weight, not from `out`: under the out_channel split a device holds
  // out / n filters with the op's attributes unchanged.
  if (wt.shape.rank() != 4 || wt.shape[2] != w.kh || wt.shape[3] != w.kw)
    throw OpError("weight " + wt.shape.str() + " does not fit kernel " + pair_str(a.ints("kernel")) +
                  " on per-sample input " + per_sample(x.shape).str() + ": expected [out, " + std::to_string(w.C) +
                  ", " + std::to_string(w.kh) + ", " + std::to_string(w.kw) + "]");
  const int64_t out = wt.shape[0];
  if (want == 3 && in[2].shape != Shape{out})
    throw OpError("bias " + in[2].shape.str() + " does not match weight " + wt.shape.str() + ": expected [" +
                  std::to_string(out) + "]");
  for (size_t k = 1; k < in.size(); ++k)
    if (in[k].dtype != x.dtype)
      throw OpError("parameter is " + in[k].str() + " but the input is " + std::string(dtype_name(x.dtype)));
  return {TensorDesc{Shape{w.B, out, w.Ho, w.Wo}, x.dtype}};
}

// y[b] (out, Ho Wo) = weight (out, C kh kw) @ col(x[b]) (C kh kw, Ho Wo) + bias; G samples per GEMM.
void conv2d_cpu(const KernelCtx& ctx, const Attrs& a, std::span<const Tensor> in, std::span<const Tensor> out) {
  Window w = conv_window(a, in[0].desc());
  bool has_bias = in.size() > 2;
#ifdef BRAID_HAVE_ONEDNN
  if (on_onednn(out[0].dtype(), cpu::SpatialPass::ConvForward, spatial_shape(w, out[0].shape()[1], has_bias)))
    return cpu::onednn_conv_forward(spatial_shape(w, out[0].shape()[1], has_bias), in[0].data<float>(),
                                    in[1].data<float>(), has_bias ? in[2].data<float>() : nullptr,
                                    out[0].data<float>(), ctx.workspace, ctx.workspace_bytes);
#endif
  dispatch_float(out[0].dtype(), [&]<typename T>() {
    const T* x = in[0].data<T>();
    const T* wt = in[1].data<T>();
    const T* bias = has_bias ? in[2].data<T>() : nullptr;
    T* y = out[0].data<T>();
    const int64_t O = out[0].shape()[1], K = w.C * w.k(), P = w.out_plane(), G = group_size(w, O, sizeof(T));
    T* col = scratch<T>(ctx, (K + O) * G * P);
    T* yg = col + K * G * P;
    for (int64_t b0 = 0; b0 < w.B; b0 += G) {
      const int64_t g = std::min(G, w.B - b0);
      im2col_group(x, w, b0, g, col);
      cpu::gemm(false, false, O, g * P, K, T(1), wt, K, col, g * P, T(0), yg, g * P);
      scatter_group(yg, bias, O, P, b0, g, y);
    }
  });
}

}  // namespace

void cpu::conv2d_activation(const KernelCtx& ctx, const Attrs& a, Act act, std::span<const Tensor> in, const Tensor& z,
                            const Tensor& y) {
  const Window w = conv_window(a, in[0].desc());
  const bool has_bias = in.size() > 2;
  const int64_t per_sample = z.numel() / w.B;
  float* zp = z.data<float>();
  float* yp = y.data<float>();
#ifdef BRAID_HAVE_ONEDNN
  const cpu::SpatialShape s = spatial_shape(w, z.shape()[1], has_bias);
  if (on_onednn(z.dtype(), cpu::SpatialPass::ConvForward, s))
    return cpu::onednn_conv_forward(s, in[0].data<float>(), in[1].data<float>(),
                                    has_bias ? in[2].data<float>() : nullptr, zp, ctx.workspace, ctx.workspace_bytes,
                                    [&](int64_t b0, int64_t n) {
                                      activation(act, zp + b0 * per_sample, yp + b0 * per_sample,
                                                 n * per_sample);
                                    });
#endif
  const Tensor outs[] = {z};
  conv2d_cpu(ctx, a, in, outs);
  parallel_for(z.numel(), 1 << 14, [&](int64_t b, int64_t e) { activation(act, zp + b, yp + b, e - b); });
}

namespace {

// The workspace of a pass: im2col's, or oneDNN's where the kernel will run there. im2col's is computed in
// any case, so a shape too large for it is refused whichever implementation runs (BRAID_CONV can switch).
size_t pass_workspace(cpu::SpatialPass pass, const Window& w, int64_t O, bool bias, DType t) {
  const size_t im2col = group_bytes(w, O, t);
  // Read here in every build, so that BRAID_CONV=onednn in a braid without oneDNN warns at plan time.
  const bool onednn = cpu::conv_impl() == cpu::ConvImpl::OneDnn && t == DType::f32;
#ifdef BRAID_HAVE_ONEDNN
  if (onednn)
    if (auto bytes = cpu::onednn_workspace(pass, spatial_shape(w, O, bias))) return *bytes;
#else
  (void)pass, (void)bias, (void)onednn;
#endif
  return im2col;
}

size_t conv_workspace(const Attrs& a, std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
  return pass_workspace(cpu::SpatialPass::ConvForward, conv_window(a, in[0]), out[0].shape[1], in.size() > 2,
                        in[0].dtype);
}

// Layouts; B = batch, C = input channels, O = output channels.
std::vector<SplitSignature> conv_splits(const Attrs& a, std::span<const TensorDesc> in,
                                        std::span<const TensorDesc> out) {
  auto sigs = all_broadcast(in, out);
  bool bias = in.size() > 2;
  auto with_bias = [&](std::vector<Sbp> v, Sbp b) {
    if (bias) v.push_back(b);
    return v;
  };
  // data: each device convolves its share of the batch with the whole weight.
  sigs.push_back({"data", with_bias({Sbp::S(0), Sbp::B()}, Sbp::B()), {Sbp::S(0)}});
  // out_channel (column): each device owns a slice of the filters (weight and bias rows) and computes
  // that slice of the output channels.
  sigs.push_back({"out_channel", with_bias({Sbp::B(), Sbp::S(0)}, Sbp::S(0)), {Sbp::S(1)}});
  // in_channel (row): each device convolves its input channels with the matching weight slice; the
  // outputs are partial sums. The bias must be added once, so it comes as P: a share per device whose sum
  // is the bias (e.g. the whole bias on one device, zeros elsewhere); without bias nothing else is needed.
  sigs.push_back({"in_channel", with_bias({Sbp::S(1), Sbp::S(1)}, Sbp::P()), {Sbp::P()}});
  return sigs;
}

Cost conv_cost(const Attrs& a, std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
  Window w = conv_window(a, in[0]);
  double macs = static_cast<double>(out[0].numel()) * static_cast<double>(w.C * w.k());
  Cost c = default_cost(in, out, 0);
  c.flops = 2 * macs + (in.size() > 2 ? static_cast<double>(out[0].numel()) : 0);
  return c;
}

void conv_grad(GradCtx& c) {
  if (!c.dout[0].valid()) return;
  ValueId dy = c.dout[0];
  if (c.needs[0]) c.din[0] = c.g.emit("conv2d_grad_input", c.attrs, {dy, c.inputs[0], c.inputs[1]})[0];
  if (c.needs[1]) c.din[1] = c.g.emit("conv2d_grad_weight", c.attrs, {dy, c.inputs[0]})[0];
  if (c.inputs.size() > 2 && c.needs[2]) c.din[2] = c.g.emit("conv2d_grad_bias", {}, {dy})[0];
}

Attrs conv_attrs(int64_t out, std::vector<int64_t> kernel, std::vector<int64_t> stride, std::vector<int64_t> padding,
                 bool bias = true) {
  return {{"out", out}, {"kernel", kernel}, {"stride", stride}, {"padding", padding}, {"bias", bias}};
}

std::vector<Sample> conv_samples() {
  return {
      {"k3", {{"out", int64_t{4}}, {"kernel", int64_t{3}}}, {{TensorDesc{Shape{2, 3, 6, 6}}}}},
      {"stride2_pad1", conv_attrs(3, {3, 3}, {2, 2}, {1, 1}), {{TensorDesc{Shape{2, 2, 7, 7}}}}},
      {"nonsquare_nobias", conv_attrs(2, {2, 3}, {1, 2}, {1, 0}, false), {{TensorDesc{Shape{2, 3, 5, 6}}}}},
      {"pointwise", {{"out", int64_t{5}}, {"kernel", int64_t{1}}}, {{TensorDesc{Shape{3, 4, 3, 3}}}}},
  };
}

std::vector<BadSample> conv_bad() {
  Attrs k3{{"out", int64_t{8}}, {"kernel", int64_t{3}}};
  return {
      {"flat_samples", k3, {TensorDesc{Shape{2, 784}}}, "conv2d needs [C, H, W] samples, got [784]"},
      {"hw_samples", k3, {TensorDesc{Shape{2, 28, 28}}}, "conv2d needs [C, H, W] samples, got [28, 28]"},
      {"kernel_too_big",
       {{"out", int64_t{8}}, {"kernel", int64_t{5}}},
       {TensorDesc{Shape{2, 1, 4, 4}}},
       "kernel [5, 5] is larger than the padded input: per-sample input [1, 4, 4] with padding [0, 0] is 4 x 4"},
      {"kernel_too_tall",
       conv_attrs(8, {6, 3}, {1, 1}, {1, 1}),
       {TensorDesc{Shape{2, 3, 3, 8}}},
       "larger than the padded input"},
      {"int_input", k3, {TensorDesc{Shape{2, 1, 8, 8}, DType::i32}}, "floating point"},
  };
}

// ---- conv2d_grad_input(dy, x, weight) -> dx ----------------------------------------------------------------
std::vector<TensorDesc> infer_grad_input(const Attrs& a, std::span<const TensorDesc> in) {
  Window w = conv_window(a, in[1]);
  const Shape &dy = in[0].shape, &wt = in[2].shape;
  BRAID_ASSERT(wt == (Shape{dy[1], w.C, w.kh, w.kw}) && dy == (Shape{w.B, dy[1], w.Ho, w.Wo}), "conv2d_grad_input: dy ",
               in[0].str(), ", x ", in[1].str(), ", weight ", in[2].str());
  return {in[1]};
}

// dcol (C kh kw, G Ho Wo) = weight^T @ dy[group] (out, G Ho Wo); dx[group] = col2im(dcol)
void grad_input_cpu(const KernelCtx& ctx, const Attrs& a, std::span<const Tensor> in, std::span<const Tensor> out) {
  Window w = conv_window(a, in[1].desc());
#ifdef BRAID_HAVE_ONEDNN
  if (on_onednn(out[0].dtype(), cpu::SpatialPass::ConvGradInput, spatial_shape(w, in[0].shape()[1], false)))
    return cpu::onednn_conv_grad_input(spatial_shape(w, in[0].shape()[1], false), in[0].data<float>(),
                                       in[2].data<float>(), out[0].data<float>(), ctx.workspace, ctx.workspace_bytes);
#endif
  dispatch_float(out[0].dtype(), [&]<typename T>() {
    const T* dy = in[0].data<T>();
    const T* wt = in[2].data<T>();
    T* dx = out[0].data<T>();
    const int64_t O = in[0].shape()[1], K = w.C * w.k(), P = w.out_plane(), G = group_size(w, O, sizeof(T));
    T* dcol = scratch<T>(ctx, (K + O) * G * P);
    T* dyg = dcol + K * G * P;
    for (int64_t b0 = 0; b0 < w.B; b0 += G) {
      const int64_t g = std::min(G, w.B - b0);
      gather_group(dy, O, P, b0, g, dyg);
      cpu::gemm(true, false, K, g * P, O, T(1), wt, K, dyg, g * P, T(0), dcol, g * P);
      col2im_group(dcol, w, b0, g, dx);
    }
  });
}

size_t grad_input_workspace(const Attrs& a, std::span<const TensorDesc> in, std::span<const TensorDesc>) {
  return pass_workspace(cpu::SpatialPass::ConvGradInput, conv_window(a, in[1]), in[0].shape[1], false, in[1].dtype);
}

std::vector<SplitSignature> grad_input_splits(const Attrs&, std::span<const TensorDesc> in,
                                              std::span<const TensorDesc> out) {
  auto sigs = all_broadcast(in, out);
  // data: per-sample independent.
  sigs.push_back({"data", {Sbp::S(0), Sbp::S(0), Sbp::B()}, {Sbp::S(0)}});
  // out_channel (forward's column split): dy's channel slice times the matching filters is a partial dx.
  sigs.push_back({"out_channel", {Sbp::S(1), Sbp::B(), Sbp::S(0)}, {Sbp::P()}});
  // in_channel (forward's row split): each device computes dx for its input channels.
  sigs.push_back({"in_channel", {Sbp::B(), Sbp::S(1), Sbp::S(1)}, {Sbp::S(1)}});
  return sigs;
}

Cost grad_input_cost(const Attrs& a, std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
  Window w = conv_window(a, in[1]);
  Cost c = default_cost(in, out, 0);
  c.flops = 2.0 * static_cast<double>(in[0].numel()) * static_cast<double>(w.C * w.k()) +
            static_cast<double>(w.B * w.C * w.k() * w.out_plane());
  return c;
}

// ---- conv2d_grad_weight(dy, x) -> dweight -------------------------------------------------------------------
std::vector<TensorDesc> infer_grad_weight(const Attrs& a, std::span<const TensorDesc> in) {
  Window w = conv_window(a, in[1]);
  const Shape& dy = in[0].shape;
  BRAID_ASSERT(dy.rank() == 4 && dy == (Shape{w.B, dy[1], w.Ho, w.Wo}), "conv2d_grad_weight: dy ", in[0].str(), ", x ",
               in[1].str());
  return {TensorDesc{Shape{dy[1], w.C, w.kh, w.kw}, in[0].dtype}};
}

// dweight (out, C kh kw) = sum over groups of dy[group] (out, G Ho Wo) @ col(x[group])^T (G Ho Wo, C kh kw)
void grad_weight_cpu(const KernelCtx& ctx, const Attrs& a, std::span<const Tensor> in, std::span<const Tensor> out) {
  Window w = conv_window(a, in[1].desc());
#ifdef BRAID_HAVE_ONEDNN
  if (on_onednn(out[0].dtype(), cpu::SpatialPass::ConvGradWeight, spatial_shape(w, in[0].shape()[1], false)))
    return cpu::onednn_conv_grad_weight(spatial_shape(w, in[0].shape()[1], false), in[0].data<float>(),
                                        in[1].data<float>(), out[0].data<float>(), ctx.workspace, ctx.workspace_bytes);
#endif
  dispatch_float(out[0].dtype(), [&]<typename T>() {
    const T* dy = in[0].data<T>();
    const T* x = in[1].data<T>();
    T* dw = out[0].data<T>();
    const int64_t O = in[0].shape()[1], K = w.C * w.k(), P = w.out_plane(), G = group_size(w, O, sizeof(T));
    T* col = scratch<T>(ctx, (K + O) * G * P);
    T* dyg = col + K * G * P;
    for (int64_t b0 = 0; b0 < w.B; b0 += G) {
      const int64_t g = std::min(G, w.B - b0);
      im2col_group(x, w, b0, g, col);
      gather_group(dy, O, P, b0, g, dyg);
      cpu::gemm(false, true, O, K, g * P, T(1), dyg, g * P, col, g * P, b0 == 0 ? T(0) : T(1), dw, K);
    }
  });
}

size_t grad_weight_workspace(const Attrs& a, std::span<const TensorDesc> in, std::span<const TensorDesc>) {
  return pass_workspace(cpu::SpatialPass::ConvGradWeight, conv_window(a, in[1]), in[0].shape[1], false, in[1].dtype);
}

std::vector<SplitSignature> grad_weight_splits(const Attrs&, std::span<const TensorDesc> in,
                                               std::span<const TensorDesc> out) {
  auto sigs = all_broadcast(in, out);
  // data: each device's batch share contributes a partial sum of the weight gradient.
  sigs.push_back({"data", {Sbp::S(0), Sbp::S(0)}, {Sbp::P()}});
  // out_channel: dy's channel slice gives those filters' rows.
  sigs.push_back({"out_channel", {Sbp::S(1), Sbp::B()}, {Sbp::S(0)}});
  // in_channel: x's channel slice gives that slice of every filter.
  sigs.push_back({"in_channel", {Sbp::B(), Sbp::S(1)}, {Sbp::S(1)}});
  return sigs;
}

Cost grad_weight_cost(const Attrs& a, std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
  Window w = conv_window(a, in[1]);
  Cost c = default_cost(in, out, 0);
  c.flops = 2.0 * static_cast<double>(in[0].numel()) * static_cast<double>(w.C * w.k());
  return c;
}

// ---- conv2d_grad_bias(dy) -> dbias: sum over every axis but 1 ---------------------------------------------
std::vector<TensorDesc> infer_grad_bias(const Attrs&, std::span<const TensorDesc> in) {
  BRAID_ASSERT(in[0].shape.rank() >= 2, "conv2d_grad_bias on ", in[0].str());
  return {TensorDesc{Shape{in[0].shape[1]}, in[0].dtype}};
}

void grad_bias_cpu(const KernelCtx&, const Attrs&, std::span<const Tensor> in, std::span<const Tensor> out) {
  const Shape& s = in[0].shape();
  int64_t B = s[0], O = s[1], P = s.numel() / std::max<int64_t>(1, B * O);
  dispatch_float(out[0].dtype(), [&]<typename T>() {
    const T* dy = in[0].data<T>();
    T* db = out[0].data<T>();
    parallel_for(O, 16, [&](int64_t o0, int64_t o1) {
      for (int64_t o = o0; o < o1; ++o) {
        double acc[cpu::kSumLanes] = {};  // each plane into the lanes, in order (cpu::add_to_lanes)
        for (int64_t b = 0; b < B; ++b) cpu::add_to_lanes(dy + (b * O + o) * P, P, acc);
        db[o] = static_cast<T>(cpu::lane_total(acc));
      }
    });
  });
}

std::vector<SplitSignature> grad_bias_splits(const Attrs&, std::span<const TensorDesc> in,
                                             std::span<const TensorDesc> out) {
  auto sigs = all_broadcast(in, out);
  sigs.push_back({"data", {Sbp::S(0)}, {Sbp::P()}});          // batch shares sum to the total
  sigs.push_back({"out_channel", {Sbp::S(1)}, {Sbp::S(0)}});  // each device sums its channels
  return sigs;
}

std::vector<AttrSpec> conv_attr_specs() {
  AttrSpec out, bias;
  out.name = "out", out.kind = AttrKind::Int, out.positive = true;
  out.doc = "output channels";
  bias.name = "bias", bias.kind = AttrKind::Bool, bias.default_value = AttrValue(true);
  bias.doc = "add a learned bias per output channel";
  return {out, spatial::pair_attr("kernel", std::nullopt, true, "kernel size: n or [kh, kw]"),
          spatial::pair_attr("stride", 1, true, "stride: n or [sh, sw]"),
          spatial::pair_attr("padding", 0, false, "zero padding on each side: n or [ph, pw]"), bias};
}

OpDef grad_def(const std::string& name, std::string doc, int n_in, InferFn infer, CpuKernel k, SplitFn splits) {
  OpDef d = internal_op(name, std::move(doc), n_in);
  d.attrs = conv_attr_specs();
  d.infer = infer;
  d.cpu = k;
  d.splits = splits;
  return d;
}

}  // namespace

void register_conv(Registry& r) {
  {
    OpDef d;
    d.name = "conv2d";
    d.doc = "2-D convolution of [C, H, W] samples (torch.nn.Conv2d: groups 1, dilation 1, zero padding)";
    d.attrs = conv_attr_specs();
    d.params = conv_params;
    d.infer = infer_conv;
    d.grad = conv_grad;
    d.splits = conv_splits;
    d.cost = conv_cost;
    d.workspace = conv_workspace;
    d.samples = conv_samples;
    d.bad_samples = conv_bad;
    d.cpu = conv2d_cpu;
    // Sums of C kh kw (or B Ho Wo for dweight) products in another order than PyTorch's: up to ~1e-6 absolute
    // on the samples, too close to the default atol for outputs near 0.
    d.torch_rtol = 1e-5;
    d.torch_atol = 1e-5;
    r.add(d);
  }
  {
    OpDef d = grad_def("conv2d_grad_input", "gradient of conv2d with respect to its input: (dy, x, weight) -> dx", 3,
                       infer_grad_input, grad_input_cpu, grad_input_splits);
    d.workspace = grad_input_workspace;
    d.cost = grad_input_cost;
    r.add(d);
  }
  {
    OpDef d = grad_def("conv2d_grad_weight", "gradient of conv2d with respect to its weight: (dy, x) -> dweight", 2,
                       infer_grad_weight, grad_weight_cpu, grad_weight_splits);
    d.workspace = grad_weight_workspace;
    d.cost = grad_weight_cost;
    r.add(d);
  }
  {
    OpDef d = grad_def("conv2d_grad_bias", "gradient of conv2d with respect to its bias: dy [B, O, ...] -> [O]", 1,
                       infer_grad_bias, grad_bias_cpu, grad_bias_splits);
    d.attrs = {};
    r.add(d);
  }
}

}  // namespace braid::ops
