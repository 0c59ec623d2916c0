// Normalisations over one axis: layer_norm (last axis, affine weight/bias, saves mean and rstd for
// backward), rms_norm (last axis, weight only, saves rstd) and softmax (any per-sample axis, numerically
// stable, backward from its output), with their internal gradient ops layer_norm_grad, rms_norm_grad and
// softmax_grad. Math matches PyTorch: nn.LayerNorm(d, eps) (biased variance, rstd = 1/sqrt(var + eps)),
// nn.RMSNorm(d, eps) (PyTorch 2.4+: rstd = 1/sqrt(mean(x^2) + eps)) and torch.softmax(x, dim). Statistics are
// accumulated in double for both float and double tensors.
#include <cmath>

#include "core/cpu_isa.h"
#include "ops/cpu/kernel_util.h"
#include "ops/registry.h"

namespace braid::ops {
namespace {

using cpu::dispatch_float;

// Per-sample axis (negative counts from the end) -> graph axis; OpError when out of range.
int graph_axis(int64_t axis, const Shape& s, const std::string& attr) {
  int r = s.rank() - 1;
  if (axis < -r || axis >= r)
    throw OpError("attribute '" + attr + "' is " + std::to_string(axis) + " but the per-sample shape has " +
                      std::to_string(r) + " axes (graph shape " + s.str() + ")",
                  "per-sample axes are 0.." + std::to_string(r - 1) + " or -" + std::to_string(r) +
                      "..-1; the batch axis is never named");
  return static_cast<int>(axis < 0 ? axis + r : axis) + 1;
}

void check_float_sample(const TensorDesc& x, const char* what) {
  if (!is_float(x.dtype)) throw OpError(std::string(what) + " must be floating point, got " + x.str());
  if (x.shape.rank() < 2)
    throw OpError(std::string(what) + " " + x.str() + " has no per-sample axis to normalise",
                  "the per-sample shape is [] (a scalar); give it at least one axis");
}

Cost flops_per_elem(std::span<const TensorDesc> in, std::span<const TensorDesc> out, double per_elem) {
  Cost c = default_cost(in, out, 0);
  c.flops = per_elem * static_cast<double>(in[0].numel());
  return c;
}

// ---- layer_norm -----------------------------------------------------------------------------------------
// x: (rows, d) row-major, d = last axis. Outputs y like x, mean and rstd of shape x.shape[:-1].
std::vector<ParamSpec> layer_norm_params(const Attrs&, std::span<const TensorDesc> in) {
  TensorDesc p{Shape{in[0].shape.back()}, in[0].dtype};
  return {{"weight", p, InitSpec::ones()}, {"bias", p, InitSpec::zeros()}};
}

std::vector<TensorDesc> infer_layer_norm(const Attrs& a, std::span<const TensorDesc> in) {
  check_float_sample(in[0], "input");
  if (!(a.f("eps") > 0)) throw OpError("attribute 'eps' must be positive, got " + std::to_string(a.f("eps")));
  int64_t d = in[0].shape.back();
  for (size_t k = 1; k < 3; ++k)
    if (in[k].shape != Shape{d} || in[k].dtype != in[0].dtype)
      throw OpError(std::string(k == 1 ? "weight" : "bias") + " is " + in[k].str() + " but the input " +
                        in[0].str() + " needs " + TensorDesc{Shape{d}, in[0].dtype}.str(),
                    "layer_norm normalises the last axis, of size " + std::to_string(d));
  Shape stat = in[0].shape;
  stat.dims().pop_back();
  return {in[0], TensorDesc{stat, in[0].dtype}, TensorDesc{stat, in[0].dtype}};
}

// Row sums over the fixed double lanes of cpu::lane_total (element j to lane j % kLanes), so the loops vectorise
// and the result is the same for every vector width and thread count.
constexpr int kLanes = cpu::kSumLanes;
using cpu::lane_total;

template <typename T>
void layer_norm_rows(const T* __restrict x, const T* __restrict w, const T* __restrict b, T* __restrict y,
                     T* __restrict mean, T* __restrict rstd, int64_t d, double eps, int64_t r0, int64_t r1) {
  const int64_t body = d / kLanes * kLanes;
  for (int64_t r = r0; r < r1; ++r) {
    const T* xr = x + r * d;
    double acc[kLanes] = {};
    for (int64_t j = 0; j < body; j += kLanes)
      for (int l = 0; l < kLanes; ++l) acc[l] += xr[j + l];
    for (int64_t j = body; j < d; ++j) acc[j - body] += xr[j];
    const double m = lane_total(acc) / static_cast<double>(d);
    double vacc[kLanes] = {};
    for (int64_t j = 0; j < body; j += kLanes)
      for (int l = 0; l < kLanes; ++l) vacc[l] += (xr[j + l] - m) * (xr[j + l] - m);
    for (int64_t j = body; j < d; ++j) vacc[j - body] += (xr[j] - m) * (xr[j] - m);
    const double v = lane_total(vacc) / static_cast<double>(d);  // biased, as PyTorch
    const double rs = 1.0 / std::sqrt(v + eps);
    mean[r] = static_cast<T>(m);
    rstd[r] = static_cast<T>(rs);
    T* yr = y + r * d;
    for (int64_t j = 0; j < d; ++j) yr[j] = static_cast<T>((xr[j] - m) * rs * w[j] + b[j]);
  }
}

void layer_norm_cpu(const KernelCtx&, const Attrs& a, std::span<const Tensor> in, std::span<const Tensor> out) {
  double eps = a.f("eps");
  dispatch_float(in[0].dtype(), [&]<typename T>() {
    const T *x = in[0].data<T>(), *w = in[1].data<T>(), *b = in[2].data<T>();
    T *y = out[0].data<T>(), *mean = out[1].data<T>(), *rstd = out[2].data<T>();
    int64_t d = in[0].shape().back(), rows = in[0].numel() / std::max<int64_t>(d, 1);
    parallel_for(rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(d, 1)), [&](int64_t r0, int64_t r1) {
      cpu_vec([&] { layer_norm_rows(x, w, b, y, mean, rstd, d, eps, r0, r1); });
    });
  });
}

// layer_norm_grad(dy, x, weight, mean, rstd) -> (dx, dweight, dbias). With xhat = (x - mean) * rstd and
// g = dy * weight: dx = rstd * (g - mean_j(g) - xhat * mean_j(g * xhat)); dweight = sum_rows dy * xhat;
// dbias = sum_rows dy.
std::vector<TensorDesc> infer_layer_norm_grad(const Attrs&, std::span<const TensorDesc> in) {
  return {in[1], in[2], in[2]};
}

template <typename T>
void layer_norm_dx_rows(const T* __restrict dy, const T* __restrict x, const T* __restrict w, const T* __restrict mean,
                        const T* __restrict rstd, T* __restrict dx, int64_t d, int64_t r0, int64_t r1) {
  const int64_t body = d / kLanes * kLanes;
  for (int64_t r = r0; r < r1; ++r) {
    const T *xr = x + r * d, *dyr = dy + r * d;
    const double m = mean[r], rs = rstd[r];
    double ag[kLanes] = {}, agx[kLanes] = {};
    for (int64_t j = 0; j < body; j += kLanes)
      for (int l = 0; l < kLanes; ++l) {
        double g = static_cast<double>(dyr[j + l]) * w[j + l], xh = (xr[j + l] - m) * rs;
        ag[l] += g;
        agx[l] += g * xh;
      }
    for (int64_t j = body; j < d; ++j) {
      double g = static_cast<double>(dyr[j]) * w[j], xh = (xr[j] - m) * rs;
      ag[j - body] += g;
      agx[j - body] += g * xh;
    }
    const double sg = lane_total(ag) / static_cast<double>(d), sgx = lane_total(agx) / static_cast<double>(d);
    T* dxr = dx + r * d;
    for (int64_t j = 0; j < d; ++j) {
      double g = static_cast<double>(dyr[j]) * w[j], xh = (xr[j] - m) * rs;
      dxr[j] = static_cast<T>(rs * (g - sg - xh * sgx));
    }
  }
}

// Parameter gradients for columns j0..j1 (at most kColBlock): rows summed in order per column, the columns of a
// row side by side (contiguous, vectorised).
constexpr int64_t kColBlock = 256;
template <typename T>
void layer_norm_dwb_cols(const T* __restrict dy, const T* __restrict x, const T* __restrict mean,
                         const T* __restrict rstd, T* __restrict dw, T* __restrict db, int64_t d, int64_t rows,
                         int64_t j0, int64_t j1) {
  double sw[kColBlock], sb[kColBlock];
  const int64_t n = j1 - j0;
  for (int64_t j = 0; j < n; ++j) sw[j] = sb[j] = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const T *dyr = dy + r * d + j0, *xr = x + r * d + j0;
    const double m = mean[r], rs = rstd[r];
    for (int64_t j = 0; j < n; ++j) {
      double g = dyr[j];
      sw[j] += g * (xr[j] - m) * rs;
      sb[j] += g;
    }
  }
  for (int64_t j = 0; j < n; ++j) {
    dw[j0 + j] = static_cast<T>(sw[j]);
    db[j0 + j] = static_cast<T>(sb[j]);
  }
}

void layer_norm_grad_cpu(const KernelCtx&, const Attrs&, std::span<const Tensor> in, std::span<const Tensor> out) {
  dispatch_float(in[1].dtype(), [&]<typename T>() {
    const T *dy = in[0].data<T>(), *x = in[1].data<T>(), *w = in[2].data<T>();
    const T *mean = in[3].data<T>(), *rstd = in[4].data<T>();
    T *dx = out[0].data<T>(), *dw = out[1].data<T>(), *db = out[2].data<T>();
    int64_t d = in[1].shape().back(), rows = in[1].numel() / std::max<int64_t>(d, 1);
    parallel_for(rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(d, 1)), [&](int64_t r0, int64_t r1) {
      cpu_vec([&] { layer_norm_dx_rows(dy, x, w, mean, rstd, dx, d, r0, r1); });
    });
    // Parameter gradients: blocks of columns in parallel, rows summed in order (deterministic).
    const int64_t per_thread_cols = std::max<int64_t>(16, (d + num_threads() - 1) / num_threads());
    const int64_t width = std::min(kColBlock, (per_thread_cols + 15) / 16 * 16);
    parallel_for((d + width - 1) / width, 1, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c)
        cpu_vec(
            [&] { layer_norm_dwb_cols(dy, x, mean, rstd, dw, db, d, rows, c * width, std::min(d, (c + 1) * width)); });
    });
  });
}

void layer_norm_grad_rule(GradCtx& c) {
  if (!c.dout[0].valid()) return;
  auto g = c.g.emit("layer_norm_grad", {},
                    {c.dout[0], c.inputs[0], c.inputs[1], c.outputs[1], c.outputs[2]});
  for (size_t i = 0; i < 3; ++i)
    if (c.needs[i]) c.din[i] = g[i];
}

// x S(a) on any axis but the last (rows are independent), weight and bias B: y, mean, rstd S(a).
std::vector<SplitSignature> layer_norm_splits(const Attrs&, std::span<const TensorDesc> in,
                                              std::span<const TensorDesc> out) {
  auto sigs = all_broadcast(in, out);
  for (int a = 0; a + 1 < in[0].shape.rank(); ++a)
    sigs.push_back({a == 0 ? "data" : "split" + std::to_string(a), {Sbp::S(a), Sbp::B(), Sbp::B()},
                    {Sbp::S(a), Sbp::S(a), Sbp::S(a)}});
  return sigs;
}

// dy, x, mean, rstd S(a) with weight B: dx S(a); dweight and dbias are sums over rows, so each shard
// holds a partial sum (P).
std::vector<SplitSignature> layer_norm_grad_splits(const Attrs&, std::span<const TensorDesc> in,
                                                   std::span<const TensorDesc> out) {
  auto sigs = all_broadcast(in, out);
  for (int a = 0; a + 1 < in[1].shape.rank(); ++a)
    sigs.push_back({a == 0 ? "data" : "split" + std::to_string(a),
                    {Sbp::S(a), Sbp::S(a), Sbp::B(), Sbp::S(a), Sbp::S(a)}, {Sbp::S(a), Sbp::P(), Sbp::P()}});
  return sigs;
}

std::vector<Sample> layer_norm_samples() {
  return {{"3d", {}, {{TensorDesc{Shape{2, 3, 8}}, 0, -2, 2}}},
          {"2d_eps", {{"eps", 1e-3}}, {{TensorDesc{Shape{3, 5}}, 0, -2, 2}}}};
}
std::vector<BadSample> layer_norm_bad() {
  return {{"int", {}, {TensorDesc{Shape{2, 4}, DType::i32}}, "floating point"},
          {"scalar_sample", {}, {TensorDesc{Shape{4}}}, "no per-sample axis"},
          {"eps", {{"eps", 0.0}}, {TensorDesc{Shape{2, 4}}}, "'eps' must be positive"}};
}

// ---- rms_norm -------------------------------------------------------------------------------------------
// x: (rows, d) row-major, d = last axis. y = x * rstd * weight with rstd = 1 / sqrt(mean_j(x^2) + eps) (Llama's
// RMSNorm, torch.nn.RMSNorm of later PyTorch). Outputs y like x and rstd of shape x.shape[:-1], saved for backward.
std::vector<ParamSpec> rms_norm_params(const Attrs&, std::span<const TensorDesc> in) {
  return {{"weight", TensorDesc{Shape{in[0].shape.back()}, in[0].dtype}, InitSpec::ones()}};
}

std::vector<TensorDesc> infer_rms_norm(const Attrs& a, std::span<const TensorDesc> in) {
  check_float_sample(in[0], "input");
  if (!(a.f("eps") > 0)) throw OpError("attribute 'eps' must be positive, got " + std::to_string(a.f("eps")));
  int64_t d = in[0].shape.back();
  if (in[1].shape != Shape{d} || in[1].dtype != in[0].dtype)
    throw OpError("weight is " + in[1].str() + " but the input " + in[0].str() + " needs " +
                      TensorDesc{Shape{d}, in[0].dtype}.str(),
                  "rms_norm normalises the last axis, of size " + std::to_string(d));
  Shape stat = in[0].shape;
  stat.dims().pop_back();
  return {in[0], TensorDesc{stat, in[0].dtype}};
}

// One pass per row: the sum of squares over the fixed double lanes, then y.
template <typename T>
void rms_norm_rows(const T* __restrict x, const T* __restrict w, T* __restrict y, T* __restrict rstd, int64_t d,
                   double eps, int64_t r0, int64_t r1) {
  const int64_t body = d / kLanes * kLanes;
  for (int64_t r = r0; r < r1; ++r) {
    const T* xr = x + r * d;
    double acc[kLanes] = {};
    for (int64_t j = 0; j < body; j += kLanes)
      for (int l = 0; l < kLanes; ++l) acc[l] += static_cast<double>(xr[j + l]) * xr[j + l];
    for (int64_t j = body; j < d; ++j) acc[j - body] += static_cast<double>(xr[j]) * xr[j];
    const double rs = 1.0 / std::sqrt(lane_total(acc) / static_cast<double>(d) + eps);
    rstd[r] = static_cast<T>(rs);
    T* yr = y + r * d;
    for (int64_t j = 0; j < d; ++j) yr[j] = static_cast<T>(xr[j] * rs * w[j]);
  }
}

void rms_norm_cpu(const KernelCtx&, const Attrs& a, std::span<const Tensor> in, std::span<const Tensor> out) {
  double eps = a.f("eps");
  dispatch_float(in[0].dtype(), [&]<typename T>() {
    const T *x = in[0].data<T>(), *w = in[1].data<T>();
    T *y = out[0].data<T>(), *rstd = out[1].data<T>();
    int64_t d = in[0].shape().back(), rows = in[0].numel() / std::max<int64_t>(d, 1);
    parallel_for(rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(d, 1)), [&](int64_t r0, int64_t r1) {
      cpu_vec([&] { rms_norm_rows(x, w, y, rstd, d, eps, r0, r1); });
    });
  });
}

// rms_norm_grad(dy, x, weight, rstd) -> (dx, dweight). With xhat = x * rstd and g = dy * weight:
// dx = rstd * (g - xhat * mean_j(g * xhat)); dweight = sum_rows dy * xhat.
// One pass over the rows: each row's dx, and dy * xhat added into its chunk's partial dweight (double, rows in
// order). The chunks are fixed by the row count alone (rms_chunks), the partials are then summed in chunk order,
// so dweight does not depend on the thread count. The partials live in the op's workspace.
constexpr int64_t kRmsMaxChunks = 32, kRmsMinChunkRows = 8;
int64_t rms_chunks(int64_t rows) {
  return std::clamp<int64_t>((rows + kRmsMinChunkRows - 1) / kRmsMinChunkRows, 1, kRmsMaxChunks);
}
size_t rms_norm_grad_workspace(const Attrs&, std::span<const TensorDesc> in, std::span<const TensorDesc>) {
  int64_t d = in[1].shape.back(), rows = in[1].numel() / std::max<int64_t>(d, 1);
  return static_cast<size_t>(size_mul(rms_chunks(rows), d)) * sizeof(double);
}

std::vector<TensorDesc> infer_rms_norm_grad(const Attrs&, std::span<const TensorDesc> in) { return {in[1], in[2]}; }

template <typename T>
void rms_norm_grad_rows(const T* __restrict dy, const T* __restrict x, const T* __restrict w,
                        const T* __restrict rstd, T* __restrict dx, double* __restrict pw, int64_t d, int64_t r0,
                        int64_t r1) {
  const int64_t body = d / kLanes * kLanes;
  for (int64_t j = 0; j < d; ++j) pw[j] = 0;
  for (int64_t r = r0; r < r1; ++r) {
    const T *xr = x + r * d, *dyr = dy + r * d;
    const double rs = rstd[r];
    double agx[kLanes] = {};
    for (int64_t j = 0; j < body; j += kLanes)
      for (int l = 0; l < kLanes; ++l) {
        double dyx = static_cast<double>(dyr[j + l]) * (xr[j + l] * rs);
        agx[l] += dyx * w[j + l];
        pw[j + l] += dyx;
      }
    for (int64_t j = body; j < d; ++j) {
      double dyx = static_cast<double>(dyr[j]) * (xr[j] * rs);
      agx[j - body] += dyx * w[j];
      pw[j] += dyx;
    }
    const double sgx = lane_total(agx) / static_cast<double>(d);
    T* dxr = dx + r * d;
    for (int64_t j = 0; j < d; ++j) {
      double g = static_cast<double>(dyr[j]) * w[j], xh = xr[j] * rs;
      dxr[j] = static_cast<T>(rs * (g - xh * sgx));
    }
  }
}

template <typename T>
void rms_norm_dw_finish(const double* __restrict pw, T* __restrict dw, int64_t chunks, int64_t d, int64_t j0,
                        int64_t j1) {
  for (int64_t j = j0; j < j1; ++j) {
    double s = 0;
    for (int64_t c = 0; c < chunks; ++c) s += pw[c * d + j];
    dw[j] = static_cast<T>(s);
  }
}

void rms_norm_grad_cpu(const KernelCtx& ctx, const Attrs&, std::span<const Tensor> in, std::span<const Tensor> out) {
  dispatch_float(in[1].dtype(), [&]<typename T>() {
    const T *dy = in[0].data<T>(), *x = in[1].data<T>(), *w = in[2].data<T>(), *rstd = in[3].data<T>();
    T *dx = out[0].data<T>(), *dw = out[1].data<T>();
    int64_t d = in[1].shape().back(), rows = in[1].numel() / std::max<int64_t>(d, 1);
    const int64_t chunks = rms_chunks(rows), per = (rows + chunks - 1) / chunks;
    BRAID_ASSERT(ctx.workspace_bytes >= static_cast<size_t>(chunks * d) * sizeof(double),
                 "rms_norm_grad: workspace of ", ctx.workspace_bytes, " bytes, needs ", chunks * d * 8);
    auto* pw = static_cast<double*>(ctx.workspace);
    parallel_for(chunks, 1, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c)
        cpu_vec([&] {
          rms_norm_grad_rows(dy, x, w, rstd, dx, pw + c * d, d, std::min(rows, c * per), std::min(rows, (c + 1) * per));
        });
    });
    parallel_for(d, 256, [&](int64_t j0, int64_t j1) { rms_norm_dw_finish(pw, dw, chunks, d, j0, j1); });
  });
}

void rms_norm_grad_rule(GradCtx& c) {
  if (!c.dout[0].valid()) return;
  auto g = c.g.emit("rms_norm_grad", {}, {c.dout[0], c.inputs[0], c.inputs[1], c.outputs[1]});
  for (size_t i = 0; i < 2; ++i)
    if (c.needs[i]) c.din[i] = g[i];
}

// x S(a) on any axis but the last (rows are independent), weight B: y and rstd S(a).
std::vector<SplitSignature> rms_norm_splits(const Attrs&, std::span<const TensorDesc> in,
                                            std::span<const TensorDesc> out) {
  auto sigs = all_broadcast(in, out);
  for (int a = 0; a + 1 < in[0].shape.rank(); ++a)
    sigs.push_back(
        {a == 0 ? "data" : "split" + std::to_string(a), {Sbp::S(a), Sbp::B()}, {Sbp::S(a), Sbp::S(a)}});
  return sigs;
}

// dy, x, rstd S(a) with weight B: dx S(a); dweight is a sum over rows, so each shard holds a partial sum (P).
std::vector<SplitSignature> rms_norm_grad_splits(const Attrs&, std::span<const TensorDesc> in,
                                                 std::span<const TensorDesc> out) {
  auto sigs = all_broadcast(in, out);
  for (int a = 0; a + 1 < in[1].shape.rank(); ++a)
    sigs.push_back({a == 0 ? "data" : "split" + std::to_string(a), {Sbp::S(a), Sbp::S(a), Sbp::B(), Sbp::S(a)},
                    {Sbp::S(a), Sbp::P()}});
  return sigs;
}

std::vector<Sample> rms_norm_samples() {
  // 3d_many_rows: 40 rows of 11, five chunks of partial weight gradients and a remainder past the lanes.
  return {{"3d", {}, {{TensorDesc{Shape{2, 3, 8}}, 0, -2, 2}}},
          {"2d_eps", {{"eps", 1e-3}}, {{TensorDesc{Shape{3, 5}}, 0, -2, 2}}},
          {"3d_many_rows", {}, {{TensorDesc{Shape{4, 10, 11}}, 0, -2, 2}}}};
}
std::vector<BadSample> rms_norm_bad() {
  return {{"int", {}, {TensorDesc{Shape{2, 4}, DType::i32}}, "floating point"},
          {"scalar_sample", {}, {TensorDesc{Shape{4}}}, "no per-sample axis"},
          {"eps", {{"eps", 0.0}}, {TensorDesc{Shape{2, 4}}}, "'eps' must be positive"},
          {"eps_negative", {{"eps", -1e-6}}, {TensorDesc{Shape{2, 4}}}, "'eps' must be positive"}};
}

// ---- softmax --------------------------------------------------------------------------------------------
// The tensor viewed as (outer, n, inner) around the softmax axis.
struct AxisView {
  int64_t outer = 1, n = 1, inner = 1;
};
AxisView axis_view(const Shape& s, int ax) {
  AxisView v;
  for (int i = 0; i < s.rank(); ++i) {
    if (i < ax) v.outer *= s[i];
    else if (i == ax) v.n = s[i];
    else v.inner *= s[i];
  }
  return v;
}

std::vector<TensorDesc> infer_softmax(const Attrs& a, std::span<const TensorDesc> in) {
  check_float_sample(in[0], "input");
  graph_axis(a.i("axis"), in[0].shape, "axis");
  return {in[0]};
}

// y = exp(x - max) / sum exp(x - max) along the axis.
void softmax_cpu(const KernelCtx&, const Attrs& a, std::span<const Tensor> in, std::span<const Tensor> out) {
  AxisView v = axis_view(in[0].shape(), graph_axis(a.i("axis"), in[0].shape(), "axis"));
  dispatch_float(in[0].dtype(), [&]<typename T>() {
    const T* x = in[0].data<T>();
    T* y = out[0].data<T>();
    parallel_for(v.outer * v.inner, std::max<int64_t>(1, 4096 / v.n), [&](int64_t l0, int64_t l1) {
      for (int64_t l = l0; l < l1; ++l) {
        int64_t base = (l / v.inner) * v.n * v.inner + l % v.inner;
        T mx = x[base];
        for (int64_t k = 1; k < v.n; ++k) mx = std::max(mx, x[base + k * v.inner]);
        double s = 0;
        for (int64_t k = 0; k < v.n; ++k) {
          T e = std::exp(x[base + k * v.inner] - mx);
          y[base + k * v.inner] = e;
          s += e;
        }
        T inv = static_cast<T>(1.0 / s);
        for (int64_t k = 0; k < v.n; ++k) y[base + k * v.inner] *= inv;
      }
    });
  });
}

// softmax_grad(dy, y) -> dx = y * (dy - sum_axis(dy * y)).
void softmax_grad_cpu(const KernelCtx&, const Attrs& a, std::span<const Tensor> in, std::span<const Tensor> out) {
  AxisView v = axis_view(in[1].shape(), graph_axis(a.i("axis"), in[1].shape(), "axis"));
  dispatch_float(in[1].dtype(), [&]<typename T>() {
    const T *dy = in[0].data<T>(), *y = in[1].data<T>();
    T* dx = out[0].data<T>();
    parallel_for(v.outer * v.inner, std::max<int64_t>(1, 4096 / v.n), [&](int64_t l0, int64_t l1) {
      for (int64_t l = l0; l < l1; ++l) {
        int64_t base = (l / v.inner) * v.n * v.inner + l % v.inner;
        double s = 0;
        for (int64_t k = 0; k < v.n; ++k) s += static_cast<double>(dy[base + k * v.inner]) * y[base + k * v.inner];
        for (int64_t k = 0; k < v.n; ++k) {
          int64_t i = base + k * v.inner;
          dx[i] = static_cast<T>(y[i] * (dy[i] - s));
        }
      }
    });
  });
}

std::vector<TensorDesc> infer_softmax_grad(const Attrs&, std::span<const TensorDesc> in) { return {in[1]}; }

void softmax_grad_rule(GradCtx& c) {
  if (c.dout[0].valid() && c.needs[0]) c.din[0] = c.g.emit("softmax_grad", c.attrs, {c.dout[0], c.outputs[0]})[0];
}

// Every operand S(a) on any axis other than the softmax axis (each softmax row stays on one device).
std::vector<SplitSignature> softmax_splits(const Attrs& a, std::span<const TensorDesc> in,
                                           std::span<const TensorDesc> out) {
  const Shape& s = out[0].shape;
  int ax = graph_axis(a.i("axis"), s, "axis");
  auto sigs = all_broadcast(in, out);
  for (int k = 0; k < s.rank(); ++k)
    if (k != ax)
      sigs.push_back({k == 0 ? "data" : "split" + std::to_string(k), std::vector<Sbp>(in.size(), Sbp::S(k)),
                      {Sbp::S(k)}});
  return sigs;
}

std::vector<Sample> softmax_samples() {
  auto x3 = TestInput{TensorDesc{Shape{2, 3, 5}}, 0, -3, 3};
  return {{"last", {{"axis", int64_t{-1}}}, {x3}},
          {"first", {{"axis", int64_t{0}}}, {x3}},
          {"neg2", {{"axis", int64_t{-2}}}, {{TensorDesc{Shape{2, 4, 3, 2}}, 0, -3, 3}}},
          {"2d", {}, {{TensorDesc{Shape{3, 6}}, 0, -3, 3}}}};
}
std::vector<BadSample> softmax_bad() {
  return {{"axis_high", {{"axis", int64_t{2}}}, {TensorDesc{Shape{2, 3, 4}}}, "per-sample shape has 2 axes"},
          {"axis_low", {{"axis", int64_t{-3}}}, {TensorDesc{Shape{2, 3, 4}}}, "'axis' is -3"},
          {"int", {}, {TensorDesc{Shape{2, 3}, DType::i64}}, "floating point"}};
}

}  // namespace

void register_norm(Registry& r) {
  {
    OpDef d;
    d.name = "layer_norm";
    d.cheap_recompute = true;
    d.doc = "normalises the last axis to zero mean and unit variance, then scales by weight and adds bias";
    d.attrs = {{"eps", AttrKind::Float, AttrValue(1e-5), false, {}, 0, false, false, "added to the variance"}};
    d.public_outputs = 1;  // outputs 1, 2: mean and rstd per row, saved for backward
    d.params = layer_norm_params;
    d.infer = infer_layer_norm;
    d.grad = layer_norm_grad_rule;
    d.splits = layer_norm_splits;
    d.cost = [](const Attrs&, std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
      return flops_per_elem(in, out, 8);
    };
    d.cpu = layer_norm_cpu;
    d.samples = layer_norm_samples;
    d.bad_samples = layer_norm_bad;
    r.add(d);
  }
  {
    OpDef d;
    d.name = "layer_norm_grad";
    d.doc = "gradient of layer_norm: (dy, x, weight, mean, rstd) -> (dx, dweight, dbias)";
    d.internal = true;
    d.differentiable = false;
    d.min_inputs = d.max_inputs = 5;
    d.infer = infer_layer_norm_grad;
    d.splits = layer_norm_grad_splits;
    d.cost = [](const Attrs&, std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
      return flops_per_elem(in.subspan(1), out, 14);
    };
    d.cpu = layer_norm_grad_cpu;
    r.add(d);
  }
  {
    OpDef d;
    d.name = "rms_norm";
    d.cheap_recompute = true;
    d.doc = "divides the last axis by its root mean square, then scales by weight (Llama's RMSNorm)";
    d.attrs = {{"eps", AttrKind::Float, AttrValue(1e-6), false, {}, 0, false, false, "added to the mean square"}};
    d.public_outputs = 1;  // output 1: rstd per row, saved for backward
    d.params = rms_norm_params;
    d.infer = infer_rms_norm;
    d.grad = rms_norm_grad_rule;
    d.splits = rms_norm_splits;
    d.cost = [](const Attrs&, std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
      return flops_per_elem(in, out, 4);  // x^2, its sum, * rstd, * weight
    };
    d.cpu = rms_norm_cpu;
    d.samples = rms_norm_samples;
    d.bad_samples = rms_norm_bad;
    r.add(d);
  }
  {
    OpDef d;
    d.name = "rms_norm_grad";
    d.doc = "gradient of rms_norm: (dy, x, weight, rstd) -> (dx, dweight)";
    d.internal = true;
    d.differentiable = false;
    d.min_inputs = d.max_inputs = 4;
    d.infer = infer_rms_norm_grad;
    d.splits = rms_norm_grad_splits;
    d.cost = [](const Attrs&, std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
      return flops_per_elem(in.subspan(1), out, 11);  // xhat, dy xhat, its weight product and sum, dweight's sum, dx
    };
    d.workspace = rms_norm_grad_workspace;
    d.cpu = rms_norm_grad_cpu;
    r.add(d);
  }
  std::vector<AttrSpec> axis_attr{
      {"axis", AttrKind::Int, AttrValue(int64_t{-1}), false, {}, 0, false, false, "per-sample axis"}};
  {
    OpDef d;
    d.name = "softmax";
    d.doc = "exp(x) / sum exp(x) along a per-sample axis, computed stably (max subtracted)";
    d.attrs = axis_attr;
    d.infer = infer_softmax;
    d.grad = softmax_grad_rule;
    d.splits = softmax_splits;
    d.cost = [](const Attrs&, std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
      return flops_per_elem(in, out, 5);
    };
    d.cpu = softmax_cpu;
    d.samples = softmax_samples;
    d.bad_samples = softmax_bad;
    r.add(d);
  }
  {
    OpDef d;
    d.name = "softmax_grad";
    d.doc = "gradient of softmax from its output: (dy, y) -> y * (dy - sum(dy * y))";
    d.internal = true;
    d.differentiable = false;
    d.attrs = axis_attr;
    d.min_inputs = d.max_inputs = 2;
    d.infer = infer_softmax_grad;
    d.splits = softmax_splits;
    d.cost = [](const Attrs&, std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
      return flops_per_elem(in, out, 4);
    };
    d.cpu = softmax_grad_cpu;
    r.add(d);
  }
}

}  // namespace braid::ops
