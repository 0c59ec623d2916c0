// batch_norm: normalises axis 1 of [B, C, ...] (the per-sample channel axis 0) over every other axis, as
// F.batch_norm / nn.BatchNorm{1,2,3}d. Training: batch statistics with the biased variance; the buffers
// running_mean and running_var are updated in place with `momentum` and the UNBIASED variance, and
// num_batches_tracked += 1. Eval (KernelCtx::training false): the running statistics, nothing mutated.
// Outputs 1 and 2 (mean and invstd per channel, those used by output 0) are saved for batch_norm_grad.
// Statistics accumulate in double, channel by channel, over the fixed lanes of cpu::lane_total (element e of
// each plane into lane e % kSumLanes): results do not depend on the thread count or the vector width.
#include <cmath>

#include "core/cpu_isa.h"
#include "core/parallel.h"
#include "ops/cpu/kernel_util.h"
#include "ops/defs/spatial_util.h"
#include "ops/registry.h"

namespace braid::ops {
namespace {

using cpu::dispatch_float;
using spatial::per_sample;

// Inputs in order: x, then ParamsFn's order.
enum : int { kX = 0, kWeight, kBias, kRunningMean, kRunningVar, kNumBatches, kNumInputs };

// x is [B, C, ...]: returns C, or throws with the per-sample shape.
int64_t channels_of(const TensorDesc& x) {
  if (x.shape.rank() < 2)
    throw OpError("batch_norm needs [C] or [C, ...] samples, got " + per_sample(x.shape).str(),
                  "it normalises each channel (axis 0 of a sample) over the batch; a per-sample scalar has none");
  if (!is_float(x.dtype))
    throw OpError("batch_norm needs floating point input, got " + std::string(dtype_name(x.dtype)) + " samples " +
                  per_sample(x.shape).str());
  return x.shape[1];
}

// x viewed as (B, C, S): S is the product of the axes after the channels.
struct Layout {
  int64_t B, C, S;
  int64_t n() const { return B * S; }  // values per channel
  int64_t at(int64_t b, int64_t c) const { return (b * C + c) * S; }
};
Layout layout_of(const Shape& s) { return {s[0], s[1], s.numel() / std::max<int64_t>(1, s[0] * s[1])}; }

// Shared by batch_norm and its synchronised form (bn_sync_*), so that both compute bit for bit the same.
// Training: running statistics take the batch mean and the unbiased variance (sq = sum of squared deviations
// over n values; one value falls back to 0, where PyTorch refuses).
template <typename T>
void update_running(T* rm, T* rv, int64_t c, double m, double sq, double n, double mom) {
  double unbiased = n > 1 ? sq / (n - 1) : 0.0;
  rm[c] = static_cast<T>((1 - mom) * rm[c] + mom * m);
  rv[c] = static_cast<T>((1 - mom) * rv[c] + mom * unbiased);
}

// Channel c's values are B planes of S contiguous elements. Its sums run plane by plane over double lanes
// (element e of a plane into lane e % kLanes, the lanes added by lane_total in a fixed tree): independent chains
// that vectorise, where one running sum per channel had been a chain of dependent additions (the ResNet's batch
// norm forward and backward were 35% of its step, docs/benchmarks.md). The same bits for any vector width and
// thread count (a channel is one thread's).
constexpr int kLanes = cpu::kSumLanes;
using cpu::lane_total;

// Each loop runs over one channel: its B planes of S elements, `stride` apart (x points at plane 0).
template <typename T>
double channel_sum_t(const T* __restrict x, int64_t B, int64_t S, int64_t stride) {
  const int64_t body = S / kLanes * kLanes;
  double acc[kLanes] = {};
  for (int64_t b = 0; b < B; ++b, x += stride) {
    for (int64_t e = 0; e < body; e += kLanes)
      for (int l = 0; l < kLanes; ++l) acc[l] += x[e + l];
    for (int64_t e = body; e < S; ++e) acc[e - body] += x[e];
  }
  return lane_total(acc);
}

template <typename T>
double channel_sqdev_t(const T* __restrict x, int64_t B, int64_t S, int64_t stride, double m) {
  const int64_t body = S / kLanes * kLanes;
  double acc[kLanes] = {};
  for (int64_t b = 0; b < B; ++b, x += stride) {
    for (int64_t e = 0; e < body; e += kLanes)
      for (int l = 0; l < kLanes; ++l) acc[l] += (x[e + l] - m) * (x[e + l] - m);
    for (int64_t e = body; e < S; ++e) acc[e - body] += (x[e] - m) * (x[e] - m);
  }
  return lane_total(acc);
}

// sum dy and sum dy * xhat, xhat = (x - m) * inv.
template <typename T>
std::pair<double, double> channel_grad_sums_t(const T* __restrict dy, const T* __restrict x, int64_t B, int64_t S,
                                              int64_t stride, double m, double inv) {
  const int64_t body = S / kLanes * kLanes;
  double sdy[kLanes] = {}, sdyx[kLanes] = {};
  for (int64_t b = 0; b < B; ++b, x += stride, dy += stride) {
    for (int64_t e = 0; e < body; e += kLanes)
      for (int l = 0; l < kLanes; ++l) {
        sdy[l] += dy[e + l];
        sdyx[l] += static_cast<double>(dy[e + l]) * (x[e + l] - m) * inv;
      }
    for (int64_t e = body; e < S; ++e) {
      sdy[e - body] += dy[e];
      sdyx[e - body] += static_cast<double>(dy[e]) * (x[e] - m) * inv;
    }
  }
  return {lane_total(sdy), lane_total(sdyx)};
}

template <typename T>
void channel_affine_t(const T* __restrict x, T* __restrict y, int64_t B, int64_t S, int64_t stride, double scale,
                      double shift) {
  for (int64_t b = 0; b < B; ++b, x += stride, y += stride)
    for (int64_t e = 0; e < S; ++e) y[e] = static_cast<T>(x[e] * scale + shift);
}

// dx = k (dy - (sdy + xhat sdyx) / n) in training, k dy in eval (inv_n = 1 / n: a multiply per element, not a
// division).
template <typename T>
void channel_dx_t(const T* __restrict dy, const T* __restrict x, T* __restrict dx, int64_t B, int64_t S, int64_t stride,
                  double m, double inv, double k, double sdy, double sdyx, double inv_n, bool train) {
  for (int64_t b = 0; b < B; ++b, x += stride, dy += stride, dx += stride) {
    if (!train) {
      for (int64_t e = 0; e < S; ++e) dx[e] = static_cast<T>(k * static_cast<double>(dy[e]));
      continue;
    }
    for (int64_t e = 0; e < S; ++e) dx[e] = static_cast<T>(k * (dy[e] - (sdy + (x[e] - m) * inv * sdyx) * inv_n));
  }
}

template <typename T>
double channel_sum(const Layout& l, int64_t c, const T* x) {
  return cpu_vec([&] { return channel_sum_t(x + l.at(0, c), l.B, l.S, l.C * l.S); });
}

template <typename T>
double channel_sqdev(const Layout& l, int64_t c, const T* x, double m) {
  return cpu_vec([&] { return channel_sqdev_t(x + l.at(0, c), l.B, l.S, l.C * l.S, m); });
}

// y = (x - m) * inv * w + b over channel c; the statistics used are saved for backward.
template <typename T>
void normalise_channel(const Layout& l, int64_t c, double m, double inv, const T* x, const T* w, const T* bias, T* y,
                       T* mean, T* invstd) {
  mean[c] = static_cast<T>(m);
  invstd[c] = static_cast<T>(inv);
  const double scale = w[c] * inv, shift = bias[c] - m * scale;
  cpu_vec([&] { channel_affine_t(x + l.at(0, c), y + l.at(0, c), l.B, l.S, l.C * l.S, scale, shift); });
}

void count_batch(const Tensor& nbt) {
  if (nbt.dtype() == DType::i64)
    nbt.data<int64_t>()[0] += 1;
  else
    nbt.data<int32_t>()[0] += 1;
}

// Channel c's sums of dy and of dy * xhat, xhat = (x - m) * inv.
template <typename T>
std::pair<double, double> grad_sums(const Layout& l, int64_t c, const T* dy, const T* x, double m, double inv) {
  return cpu_vec([&] { return channel_grad_sums_t(dy + l.at(0, c), x + l.at(0, c), l.B, l.S, l.C * l.S, m, inv); });
}

// dx over channel c: k (dy - (sdy + xhat sdyx) / n) in training (the statistics depend on x), k dy in eval;
// k = weight * invstd.
template <typename T>
void write_dx(const Layout& l, int64_t c, const T* dy, const T* x, double m, double inv, double k, double sdy,
              double sdyx, double n, bool train, T* dx) {
  cpu_vec([&] {
    channel_dx_t(dy + l.at(0, c), x + l.at(0, c), dx + l.at(0, c), l.B, l.S, l.C * l.S, m, inv, k, sdy, sdyx, 1.0 / n,
                 train);
  });
}

std::vector<ParamSpec> bn_params(const Attrs&, std::span<const TensorDesc> data) {
  int64_t C = channels_of(data[0]);
  DType t = data[0].dtype;
  ParamSpec nbt{"num_batches_tracked", TensorDesc{Shape{}, DType::i64}, InitSpec::zeros(), true};
  return {{"weight", TensorDesc{Shape{C}, t}, InitSpec::ones()},
          {"bias", TensorDesc{Shape{C}, t}, InitSpec::zeros()},
          {"running_mean", TensorDesc{Shape{C}, t}, InitSpec::zeros(), true},
          {"running_var", TensorDesc{Shape{C}, t}, InitSpec::ones(), true},
          nbt};
}

std::vector<TensorDesc> infer_bn(const Attrs& a, std::span<const TensorDesc> in) {
  const TensorDesc& x = in[kX];
  int64_t C = channels_of(x);
  if (!(a.f("eps") > 0)) throw OpError("eps must be positive, got " + std::to_string(a.f("eps")));
  if (!(a.f("momentum") >= 0 && a.f("momentum") <= 1))
    throw OpError("momentum must be in [0, 1], got " + std::to_string(a.f("momentum")),
                  "as in PyTorch, the new running value is (1 - momentum) * old + momentum * batch");
  if (in.size() != kNumInputs)
    throw OpError(
        "batch_norm takes 6 tensors (input, weight, bias, running_mean, running_var, "
        "num_batches_tracked), got " +
        std::to_string(in.size()));
  const char* names[] = {"", "weight", "bias", "running_mean", "running_var"};
  for (int k = kWeight; k <= kRunningVar; ++k) {
    if (in[k].shape != Shape{C})
      throw OpError("input has " + std::to_string(C) + " channels but " + names[k] + " is " + in[k].shape.str() +
                        " (per-sample input " + per_sample(x.shape).str() + ")",
                    "batch_norm's parameters and buffers are [C], C being axis 0 of a sample");
    if (in[k].dtype != x.dtype)
      throw OpError(std::string(names[k]) + " is " + in[k].str() + " but the input is " +
                    std::string(dtype_name(x.dtype)));
  }
  if (in[kNumBatches].shape.rank() != 0 || !is_int(in[kNumBatches].dtype))
    throw OpError("num_batches_tracked must be an integer scalar, got " + in[kNumBatches].str());
  TensorDesc stat{Shape{C}, x.dtype};
  return {x, stat, stat};
}

// y = (x - mean) * invstd * weight + bias, per channel c; training: mean, var over (B, S) of channel c.
void bn_cpu(const KernelCtx& ctx, const Attrs& a, std::span<const Tensor> in, std::span<const Tensor> out) {
  Layout l = layout_of(in[kX].shape());
  const double eps = a.f("eps"), mom = a.f("momentum");
  const bool train = ctx.training;
  dispatch_float(out[0].dtype(), [&]<typename T>() {
    const T* x = in[kX].data<T>();
    const T* w = in[kWeight].data<T>();
    const T* bias = in[kBias].data<T>();
    T* rm = in[kRunningMean].data<T>();  // mutated in training (mutated_inputs)
    T* rv = in[kRunningVar].data<T>();
    T* y = out[0].data<T>();
    T* mean = out[1].data<T>();
    T* invstd = out[2].data<T>();
    parallel_for(l.C, std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(1, l.n())), [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        double m, inv;
        if (train) {
          m = channel_sum(l, c, x) / static_cast<double>(l.n());
          const double sq = channel_sqdev(l, c, x, m);
          inv = 1.0 / std::sqrt(sq / static_cast<double>(l.n()) + eps);
          update_running(rm, rv, c, m, sq, static_cast<double>(l.n()), mom);
        } else {
          m = rm[c];
          inv = 1.0 / std::sqrt(static_cast<double>(rv[c]) + eps);
        }
        normalise_channel(l, c, m, inv, x, w, bias, y, mean, invstd);
      }
    });
  });
  if (train) count_batch(in[kNumBatches]);
}

void bn_grad(GradCtx& c) {
  if (!c.dout[0].valid() || !(c.needs[kX] || c.needs[kWeight] || c.needs[kBias])) return;
  auto g = c.g.emit("batch_norm_grad", {}, {c.dout[0], c.inputs[kX], c.inputs[kWeight], c.outputs[1], c.outputs[2]});
  for (int k = kX; k <= kBias; ++k)
    if (c.needs[k]) c.din[k] = g[k];
}

// Layouts of (x, weight, bias, running_mean, running_var, num_batches_tracked) -> (y, mean, invstd).
std::vector<SplitSignature> bn_splits(const Attrs&, std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
  auto sigs = all_broadcast(in, out);
  // data: each device normalises its share of the batch with ITS OWN statistics, like PyTorch DDP without
  // SyncBatchNorm: in training y is not the unsplit op's (it is in eval), the saved mean/invstd are per
  // device (B here means "kept where made"), and each device updates its own copy of the running buffers.
  // Synchronised batch norm is a later issue.
  sigs.push_back(
      {"data", {Sbp::S(0), Sbp::B(), Sbp::B(), Sbp::B(), Sbp::B(), Sbp::B()}, {Sbp::S(0), Sbp::B(), Sbp::B()}});
  // channel: channels are independent; parameters, buffers and statistics split with them; every device
  // counts the same batches.
  sigs.push_back({"channel",
                  {Sbp::S(1), Sbp::S(0), Sbp::S(0), Sbp::S(0), Sbp::S(0), Sbp::B()},
                  {Sbp::S(1), Sbp::S(0), Sbp::S(0)}});
  return sigs;
}

Cost bn_cost(const Attrs&, std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
  Cost c = default_cost(in, out, 0);
  c.flops = 6.0 * static_cast<double>(in[kX].numel());  // sum, squared deviations, scale and shift
  return c;
}

std::vector<Sample> bn_samples() {
  return {
      {"2d", {}, {{TensorDesc{Shape{6, 4}}}}},
      {"4d", {}, {{TensorDesc{Shape{2, 3, 4, 4}}, 0, -2, 3}}},
      {"3d_eps_momentum", {{"eps", 1e-3}, {"momentum", 0.25}}, {{TensorDesc{Shape{3, 2, 5}}}}},
  };
}

std::vector<BadSample> bn_bad() {
  return {
      {"scalar_samples", {}, {TensorDesc{Shape{8}}}, "batch_norm needs [C] or [C, ...] samples, got []"},
      {"int_input", {}, {TensorDesc{Shape{4, 3}, DType::i32}}, "floating point"},
      {"eps", {{"eps", 0.0}}, {TensorDesc{Shape{4, 3}}}, "eps must be positive"},
      {"momentum", {{"momentum", 1.5}}, {TensorDesc{Shape{4, 3}}}, "momentum must be in [0, 1], got 1.5"},
  };
}

// ---- batch_norm_grad(dy, x, weight, mean, invstd) -> (dx, dweight, dbias) ----------------------------------
std::vector<TensorDesc> infer_bn_grad(const Attrs&, std::span<const TensorDesc> in) {
  TensorDesc stat{Shape{in[1].shape[1]}, in[1].dtype};
  BRAID_ASSERT(in[0] == in[1] && in[2] == stat && in[3] == stat && in[4] == stat, "batch_norm_grad: dy ", in[0].str(),
               ", x ", in[1].str(), ", weight ", in[2].str(), ", mean ", in[3].str(), ", invstd ", in[4].str());
  return {in[1], stat, stat};
}

// xhat = (x - mean) invstd; dbias = sum dy; dweight = sum dy xhat;
// training: dx = weight invstd (dy - dbias / n - xhat dweight / n)  (mean and var depend on x)
// eval:     dx = weight invstd dy                                   (running statistics are constants)
void bn_grad_cpu(const KernelCtx& ctx, const Attrs&, std::span<const Tensor> in, std::span<const Tensor> out) {
  Layout l = layout_of(in[1].shape());
  const bool train = ctx.training;
  dispatch_float(out[0].dtype(), [&]<typename T>() {
    const T* dy = in[0].data<T>();
    const T* x = in[1].data<T>();
    const T* w = in[2].data<T>();
    const T* mean = in[3].data<T>();
    const T* invstd = in[4].data<T>();
    T* dx = out[0].data<T>();
    T* dw = out[1].data<T>();
    T* db = out[2].data<T>();
    const double n = static_cast<double>(l.n());
    parallel_for(l.C, std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(1, l.n())), [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        const double m = mean[c], inv = invstd[c];
        auto [sdy, sdyx] = grad_sums(l, c, dy, x, m, inv);
        db[c] = static_cast<T>(sdy);
        dw[c] = static_cast<T>(sdyx);
        write_dx(l, c, dy, x, m, inv, w[c] * inv, sdy, sdyx, n, train, dx);
      }
    });
  });
}

std::vector<SplitSignature> bn_grad_splits(const Attrs&, std::span<const TensorDesc> in,
                                           std::span<const TensorDesc> out) {
  auto sigs = all_broadcast(in, out);
  // data: the backward of the per-device forward (see bn_splits); dweight and dbias are partial sums.
  sigs.push_back({"data", {Sbp::S(0), Sbp::S(0), Sbp::B(), Sbp::B(), Sbp::B()}, {Sbp::S(0), Sbp::P(), Sbp::P()}});
  // channel: channels are independent.
  sigs.push_back(
      {"channel", {Sbp::S(1), Sbp::S(1), Sbp::S(0), Sbp::S(0), Sbp::S(0)}, {Sbp::S(1), Sbp::S(0), Sbp::S(0)}});
  return sigs;
}

Cost bn_grad_cost(const Attrs&, std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
  Cost c = default_cost(in, out, 0);
  c.flops = 8.0 * static_cast<double>(in[1].numel());
  return c;
}

// ---- synchronised batch norm (plan lowering with parallel.sync_batch_norm) ---------------------------------
// batch_norm over the data-parallel group, exact as one device over the whole micro-batch: the lowering
// replaces a batch_norm node by
//   s1 = bn_sync_sum(x); S1 = comm_all_reduce(s1); s2 = bn_sync_sqdev(x, S1); S2 = comm_all_reduce(s2);
//   y, mean, invstd = bn_sync_apply(x, S1, S2, weight, bias, running_mean, running_var, num_batches_tracked)
// with `total` the number of values per channel over the group (the statistics are those of batch_norm:
// sums in double, mean = S1 / total, biased variance S2 / total, running variance unbiased over total).
// Backward (bn_sync_apply's rule): local sums of dy and dy * xhat, all-reduced over the group, give every
// replica its part of the whole batch's dx; dweight and dbias stay the replica's own sums (the runner's
// data-parallel average completes them, as for every parameter).
std::vector<TensorDesc> infer_channel_sums(const Attrs&, std::span<const TensorDesc> in) {
  return {TensorDesc{Shape{channels_of(in[0])}, DType::f64}};
}

void bn_sync_sum_cpu(const KernelCtx&, const Attrs&, std::span<const Tensor> in, std::span<const Tensor> out) {
  Layout l = layout_of(in[0].shape());
  double* s = out[0].data<double>();
  dispatch_float(in[0].dtype(), [&]<typename T>() {
    const T* x = in[0].data<T>();
    for (int64_t c = 0; c < l.C; ++c) s[c] = channel_sum(l, c, x);
  });
}

void bn_sync_sqdev_cpu(const KernelCtx&, const Attrs& a, std::span<const Tensor> in, std::span<const Tensor> out) {
  Layout l = layout_of(in[0].shape());
  const double total = static_cast<double>(a.i("total"));
  const double* s1 = in[1].data<double>();
  double* s2 = out[0].data<double>();
  dispatch_float(in[0].dtype(), [&]<typename T>() {
    const T* x = in[0].data<T>();
    for (int64_t c = 0; c < l.C; ++c) s2[c] = channel_sqdev(l, c, x, s1[c] / total);
  });
}

enum : int { kSX = 0, kS1, kS2, kSWeight, kSBias, kSRunningMean, kSRunningVar, kSNumBatches };

std::vector<TensorDesc> infer_bn_sync_apply(const Attrs&, std::span<const TensorDesc> in) {
  TensorDesc stat{Shape{channels_of(in[kSX])}, in[kSX].dtype};
  return {in[kSX], stat, stat};
}

void bn_sync_apply_cpu(const KernelCtx& ctx, const Attrs& a, std::span<const Tensor> in, std::span<const Tensor> out) {
  BRAID_ASSERT(ctx.training, "bn_sync_apply runs in training only (evaluation uses batch_norm)");
  Layout l = layout_of(in[kSX].shape());
  const double eps = a.f("eps"), mom = a.f("momentum"), total = static_cast<double>(a.i("total"));
  const double* s1 = in[kS1].data<double>();
  const double* s2 = in[kS2].data<double>();
  dispatch_float(out[0].dtype(), [&]<typename T>() {
    const T* x = in[kSX].data<T>();
    const T* w = in[kSWeight].data<T>();
    const T* bias = in[kSBias].data<T>();
    T* rm = in[kSRunningMean].data<T>();
    T* rv = in[kSRunningVar].data<T>();
    T* y = out[0].data<T>();
    T* mean = out[1].data<T>();
    T* invstd = out[2].data<T>();
    for (int64_t c = 0; c < l.C; ++c) {
      const double m = s1[c] / total, inv = 1.0 / std::sqrt(s2[c] / total + eps);
      update_running(rm, rv, c, m, s2[c], total, mom);
      normalise_channel(l, c, m, inv, x, w, bias, y, mean, invstd);
    }
  });
  count_batch(in[kSNumBatches]);
}

void bn_sync_apply_grad(GradCtx& c) {
  if (!c.dout[0].valid() || !(c.needs[kSX] || c.needs[kSWeight] || c.needs[kSBias])) return;
  ValueId dy = c.dout[0], x = c.inputs[kSX], mean = c.outputs[1], invstd = c.outputs[2];
  ValueId local = c.g.emit("bn_sync_grad_sums", {}, {dy, x, mean, invstd})[0];
  Attrs group{{"group", std::string("data")}, {"parts", c.attrs.i("parts")}};
  ValueId global = c.g.emit("comm_all_reduce", group, {local})[0];
  auto g = c.g.emit("bn_sync_grad", {{"total", c.attrs.i("total")}},
                    {dy, x, c.inputs[kSWeight], mean, invstd, local, global});
  if (c.needs[kSX]) c.din[kSX] = g[0];
  if (c.needs[kSWeight]) c.din[kSWeight] = g[1];
  if (c.needs[kSBias]) c.din[kSBias] = g[2];
}

std::vector<TensorDesc> infer_grad_sums(const Attrs&, std::span<const TensorDesc> in) {
  return {TensorDesc{Shape{2, channels_of(in[1])}, DType::f64}};
}

// (dy, x, mean, invstd) -> [2, C]: per channel, sum dy and sum dy * xhat over this replica's values.
void bn_sync_grad_sums_cpu(const KernelCtx&, const Attrs&, std::span<const Tensor> in, std::span<const Tensor> out) {
  Layout l = layout_of(in[1].shape());
  double* s = out[0].data<double>();
  dispatch_float(in[1].dtype(), [&]<typename T>() {
    const T* dy = in[0].data<T>();
    const T* x = in[1].data<T>();
    const T* mean = in[2].data<T>();
    const T* invstd = in[3].data<T>();
    for (int64_t c = 0; c < l.C; ++c) {
      auto [sdy, sdyx] = grad_sums(l, c, dy, x, static_cast<double>(mean[c]), static_cast<double>(invstd[c]));
      s[c] = sdy;
      s[l.C + c] = sdyx;
    }
  });
}

std::vector<TensorDesc> infer_sync_grad(const Attrs&, std::span<const TensorDesc> in) {
  TensorDesc stat{Shape{in[1].shape[1]}, in[1].dtype};
  return {in[1], stat, stat};
}

// (dy, x, weight, mean, invstd, local sums, group sums) -> (dx, dweight, dbias), as batch_norm_grad in
// training with the group's sums over `total` values.
void bn_sync_grad_cpu(const KernelCtx&, const Attrs& a, std::span<const Tensor> in, std::span<const Tensor> out) {
  Layout l = layout_of(in[1].shape());
  const double n = static_cast<double>(a.i("total"));
  const double* local = in[5].data<double>();
  const double* global = in[6].data<double>();
  dispatch_float(out[0].dtype(), [&]<typename T>() {
    const T* dy = in[0].data<T>();
    const T* x = in[1].data<T>();
    const T* w = in[2].data<T>();
    const T* mean = in[3].data<T>();
    const T* invstd = in[4].data<T>();
    T* dx = out[0].data<T>();
    T* dw = out[1].data<T>();
    T* db = out[2].data<T>();
    for (int64_t c = 0; c < l.C; ++c) {
      const double m = mean[c], inv = invstd[c];
      db[c] = static_cast<T>(local[c]);
      dw[c] = static_cast<T>(local[l.C + c]);
      write_dx(l, c, dy, x, m, inv, w[c] * inv, global[c], global[l.C + c], n, true, dx);
    }
  });
}

}  // namespace

void register_batch_norm(Registry& r) {
  {
    OpDef d;
    d.name = "batch_norm";
    d.doc = "batch normalisation over the per-sample channel axis 0 (torch.nn.BatchNorm1d/2d/3d)";
    AttrSpec eps, mom;
    eps.name = "eps", eps.kind = AttrKind::Float, eps.default_value = AttrValue(1e-5);
    eps.doc = "added to the variance";
    mom.name = "momentum", mom.kind = AttrKind::Float, mom.default_value = AttrValue(0.1);
    mom.doc = "weight of the batch statistics in the running statistics";
    d.attrs = {eps, mom};
    d.public_outputs = 1;
    d.mutated_inputs = {kRunningMean, kRunningVar, kNumBatches};
    d.batch_statistics = true;
    d.params = bn_params;
    d.infer = infer_bn;
    d.grad = bn_grad;
    d.splits = bn_splits;
    d.cost = bn_cost;
    d.samples = bn_samples;
    d.bad_samples = bn_bad;
    d.cpu = bn_cpu;
    // Statistics in double: outputs and gradients within ~4e-7 of PyTorch's fp32 on the samples.
    d.torch_rtol = 1e-5;
    d.torch_atol = 1e-6;
    r.add(d);
  }
  {
    OpDef d;
    d.name = "batch_norm_grad";
    d.doc = "gradient of batch_norm: (dy, x, weight, mean, invstd) -> (dx, dweight, dbias); uses the mode";
    d.internal = true;
    d.differentiable = false;
    d.min_inputs = d.max_inputs = 5;
    d.infer = infer_bn_grad;
    d.splits = bn_grad_splits;
    d.cost = bn_grad_cost;
    d.cpu = bn_grad_cpu;
    r.add(d);
  }
  // Synchronised batch norm: internal ops that plan lowering puts in place of batch_norm (see above).
  {
    AttrSpec total{"total", AttrKind::Int, std::nullopt, false, {}, 0, true, false, "values per channel over the group"};
    AttrSpec parts{"parts", AttrKind::Int, std::nullopt, false, {}, 0, true, false, "the data-parallel group's size"};
    AttrSpec eps{"eps", AttrKind::Float, AttrValue(1e-5), false, {}, 0, false, false, "added to the variance"};
    AttrSpec mom{"momentum", AttrKind::Float, AttrValue(0.1), false, {}, 0, false, false, "running statistics weight"};
    OpDef sum = internal_op("bn_sync_sum", "per-channel sum of x in double (synchronised batch norm)", 1);
    sum.infer = infer_channel_sums;
    sum.cpu = bn_sync_sum_cpu;
    r.add(sum);
    OpDef sq = internal_op("bn_sync_sqdev", "per-channel sum of (x - S1 / total)^2 in double", 2);
    sq.attrs = {total};
    sq.infer = infer_channel_sums;
    sq.cpu = bn_sync_sqdev_cpu;
    r.add(sq);
    OpDef apply = internal_op("bn_sync_apply", "batch_norm in training with the group's sums S1 and S2", 8);
    apply.attrs = {eps, mom, total, parts};
    apply.differentiable = true;
    apply.nondiff_inputs = {kS1, kS2};
    apply.public_outputs = 1;
    apply.mutated_inputs = {kSRunningMean, kSRunningVar, kSNumBatches};
    apply.infer = infer_bn_sync_apply;
    apply.grad = bn_sync_apply_grad;
    apply.cost = bn_cost;
    apply.cpu = bn_sync_apply_cpu;
    r.add(apply);
    OpDef gs = internal_op("bn_sync_grad_sums", "(dy, x, mean, invstd) -> per-channel [sum dy; sum dy xhat]", 4);
    gs.infer = infer_grad_sums;
    gs.cpu = bn_sync_grad_sums_cpu;
    r.add(gs);
    OpDef g = internal_op("bn_sync_grad", "batch_norm_grad with the group's sums", 7);
    g.attrs = {total};
    g.infer = infer_sync_grad;
    g.cost = bn_grad_cost;
    g.cpu = bn_sync_grad_cpu;
    r.add(g);
  }
}

}  // namespace braid::ops
