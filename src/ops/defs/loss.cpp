// Losses and metrics producing one scalar of shape [] (no batch axis): cross_entropy (PyTorch's
// F.cross_entropy(logits.reshape(N, C), targets.reshape(N)), mean reduction), mse_loss (F.mse_loss, mean),
// and the metric accuracy (fraction of positions whose first argmax equals the target, like torch.argmax).
// Internal gradient ops: cross_entropy_grad, mse_loss_grad. Targets are i32 or i64 class ids; a target
// outside [0, C) is a user error (UserError naming the value and C), never an out-of-bounds read.
// Per-position terms go to the workspace and are summed in order, so results never depend on threads.
#include <cmath>

#include "core/cpu_isa.h"
#include "ops/cpu/fast_math.h"
#include "ops/cpu/kernel_util.h"
#include "ops/registry.h"

namespace braid::ops {
namespace {

using cpu::dispatch_float;

// A loss or metric over positions: the shard semantics of its P outputs, stated once.
//   Each shard computes the MEAN over its own N_k positions, so the P output of shard k is mean_k, not a
//   share of the sum. The executor of the parallel-execution issue rescales before summing: the unsplit
//   value is sum_k (N_k / N) * mean_k (with equal shards: the average of the shard values). In backward it
//   feeds each shard's gradient op dloss * N_k / N (the derivative of that rescaling), which makes the
//   shard's "/ N_k" come out as the unsplit "/ N".

// ---- shared checks -----------------------------------------------------------------------------------------
// logits [..., C] float, targets [...] integer with the same leading shape.
void check_logits_targets(std::span<const TensorDesc> in) {
  const TensorDesc &lg = in[0], &tg = in[1];
  if (!is_float(lg.dtype)) throw OpError("logits must be floating point, got " + lg.str());
  if (lg.shape.rank() < 2)
    throw OpError("logits " + lg.str() + " have no class axis", "logits are [..., C] per sample, e.g. [C] or [T, C]");
  if (!is_int(tg.dtype))
    throw OpError("targets must be integer class ids (i32 or i64), got " + tg.str(),
                  "declare the targets input with dtype: i32");
  Shape want = lg.shape;
  want.dims().pop_back();
  if (tg.shape != want)
    throw OpError("targets have shape " + tg.shape.str() + " but logits " + lg.shape.str() + " need targets " +
                      want.str() + " (the logits without their class axis)",
                  "one class id per position; the class axis (C = " + std::to_string(lg.shape.back()) +
                      ") is the last axis of the logits");
}

// Throws UserError for the first target outside [0, C) (serial: kernels validate before parallel work).
void check_targets(const Tensor& t, int64_t classes, const char* op) {
  for (int64_t i = 0; i < t.numel(); ++i) {
    int64_t v = cpu::int_at(t, i);
    if (v < 0 || v >= classes)
      throw UserError(SourceLoc{}, std::string(op) + ": target " + std::to_string(v) + " at position " +
                                       std::to_string(i) + " is outside [0, " + std::to_string(classes) +
                                       ") for logits with C = " + std::to_string(classes) + " classes",
                      "class ids must be at least 0 and below the size of the logits' last axis");
  }
}

int64_t targets_bound(const Attrs&, std::span<const TensorDesc> in, int index) {
  return index == 1 ? in[0].shape.back() : 0;
}

// Positions along every axis but the class axis may be split: the inputs S(a), the scalar P (see above).
std::vector<SplitSignature> position_splits(std::span<const TensorDesc> in, std::span<const TensorDesc> out,
                                            int axes) {
  auto sigs = all_broadcast(in, out);
  for (int a = 0; a < axes; ++a)
    sigs.push_back({a == 0 ? "data" : "split" + std::to_string(a), std::vector<Sbp>(in.size(), Sbp::S(a)),
                    {Sbp::P()}});
  return sigs;
}

double* workspace_doubles(const KernelCtx& ctx, int64_t n) {
  BRAID_ASSERT(ctx.workspace != nullptr && ctx.workspace_bytes >= static_cast<size_t>(n) * sizeof(double),
               "workspace of ", ctx.workspace_bytes, " bytes, need ", n * 8);
  return static_cast<double*>(ctx.workspace);
}

size_t rows_workspace(const Attrs&, std::span<const TensorDesc> in, std::span<const TensorDesc>) {
  return static_cast<size_t>(in[1].shape.numel()) * sizeof(double);  // one double per position
}

// ---- cross_entropy ----------------------------------------------------------------------------------------
std::vector<TensorDesc> infer_cross_entropy(const Attrs&, std::span<const TensorDesc> in) {
  check_logits_targets(in);
  return {TensorDesc{Shape{}, master_dtype(in[0].dtype)}};  // 16-bit logits: an f32 loss (sums in double)
}

// Float rows: the maximum, then e_j = exp(x_j - max) by the vectorisable fast_expf (1 ulp) written to `e`
// and added into the double lanes of cpu::add_to_lanes (summed by cpu::lane_total), so the result is the same
// for every vector width.
float row_max_f32(const float* __restrict x, int64_t c) {
  float mx = x[0];
  for (int64_t j = 1; j < c; ++j) mx = x[j] > mx ? x[j] : mx;
  return mx;
}
void exp_add_f32(const float* __restrict x, float* __restrict e, int64_t c, float mx, double* __restrict acc) {
  for (int64_t j = 0; j < c; ++j) e[j] = cpu::fast_expf(x[j] - mx);
  cpu::add_to_lanes(e, c, acc);
}
void scale_row_f32(float* __restrict e, int64_t c, float k) {
  for (int64_t j = 0; j < c; ++j) e[j] *= k;
}

// logits: (N, C) row-major. loss = mean_n (logsumexp(logits[n]) - logits[n, t_n]).
void cross_entropy_cpu(const KernelCtx& ctx, const Attrs&, std::span<const Tensor> in, std::span<const Tensor> out) {
  int64_t c = in[0].shape().back(), n = in[1].numel();
  check_targets(in[1], c, "cross_entropy");
  double* row_loss = workspace_doubles(ctx, n);
  dispatch_float(in[0].dtype(), [&]<typename T>() {
    const T* x = in[0].data<T>();
    if constexpr (std::is_same_v<T, float>) {
      parallel_for(n, std::max<int64_t>(1, 4096 / c), [&](int64_t r0, int64_t r1) {
        float e[1024];  // exponentials of a block of the row (their sum is what is kept)
        for (int64_t r = r0; r < r1; ++r) {
          const float* xr = x + r * c;
          const float mx = cpu_vec([&] { return row_max_f32(xr, c); });
          double acc[cpu::kSumLanes] = {};
          for (int64_t j0 = 0; j0 < c; j0 += 1024)
            cpu_vec([&] { exp_add_f32(xr + j0, e, std::min<int64_t>(1024, c - j0), mx, acc); });
          row_loss[r] = static_cast<double>(mx) + std::log(cpu::lane_total(acc)) - xr[cpu::int_at(in[1], r)];
        }
      });
    } else parallel_for(n, std::max<int64_t>(1, 4096 / c), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T* xr = x + r * c;
        double mx = xr[0], s = 0;
        for (int64_t j = 1; j < c; ++j) mx = std::max(mx, static_cast<double>(xr[j]));
        for (int64_t j = 0; j < c; ++j) s += std::exp(xr[j] - mx);
        row_loss[r] = mx + std::log(s) - xr[cpu::int_at(in[1], r)];
      }
    });
    double total = 0;
    for (int64_t r = 0; r < n; ++r) total += row_loss[r];
    out[0].data<T>()[0] = static_cast<T>(total / static_cast<double>(n));
  });
}

// cross_entropy_grad(dloss, logits, targets) -> dlogits = (softmax(logits) - onehot(targets)) * dloss / N.
std::vector<TensorDesc> infer_cross_entropy_grad(const Attrs&, std::span<const TensorDesc> in) { return {in[1]}; }

void cross_entropy_grad_cpu(const KernelCtx&, const Attrs&, std::span<const Tensor> in, std::span<const Tensor> out) {
  int64_t c = in[1].shape().back(), n = in[2].numel();
  check_targets(in[2], c, "cross_entropy");
  dispatch_float(in[1].dtype(), [&]<typename T>() {
    const T* x = in[1].data<T>();
    T* dx = out[0].data<T>();
    double scale = static_cast<double>(in[0].data<T>()[0]) / static_cast<double>(n);
    if constexpr (std::is_same_v<T, float>) {
      parallel_for(n, std::max<int64_t>(1, 4096 / c), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          float* dr = dx + r * c;
          const float* xr = x + r * c;
          const float mx = cpu_vec([&] { return row_max_f32(xr, c); });
          double acc[cpu::kSumLanes] = {};
          cpu_vec([&] { exp_add_f32(xr, dr, c, mx, acc); });
          const float k = static_cast<float>(scale / cpu::lane_total(acc));
          cpu_vec([&] { scale_row_f32(dr, c, k); });
          int64_t t = cpu::int_at(in[2], r);
          dr[t] = static_cast<float>(static_cast<double>(dr[t]) - scale);
        }
      });
      return;
    }
    parallel_for(n, std::max<int64_t>(1, 4096 / c), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T* xr = x + r * c;
        T* dr = dx + r * c;
        double mx = xr[0], s = 0;
        for (int64_t j = 1; j < c; ++j) mx = std::max(mx, static_cast<double>(xr[j]));
        for (int64_t j = 0; j < c; ++j) s += std::exp(xr[j] - mx);
        for (int64_t j = 0; j < c; ++j) dr[j] = static_cast<T>(std::exp(xr[j] - mx) / s * scale);
        int64_t t = cpu::int_at(in[2], r);
        dr[t] = static_cast<T>(static_cast<double>(dr[t]) - scale);
      }
    });
  });
}

void cross_entropy_grad_rule(GradCtx& c) {
  if (c.dout[0].valid() && c.needs[0])
    c.din[0] = c.g.emit("cross_entropy_grad", {}, {c.dout[0], c.inputs[0], c.inputs[1]})[0];
}

// Positions split on any axis but the class axis; the loss is P with the rescaling described at the top.
std::vector<SplitSignature> cross_entropy_splits(const Attrs&, std::span<const TensorDesc> in,
                                                 std::span<const TensorDesc> out) {
  return position_splits(in, out, in[0].shape.rank() - 1);
}

// dloss B, logits and targets S(a): dlogits S(a); each shard divides by its own N_k, so the executor feeds
// it dloss * N_k / N (see the note at the top).
std::vector<SplitSignature> cross_entropy_grad_splits(const Attrs&, std::span<const TensorDesc> in,
                                                      std::span<const TensorDesc> out) {
  auto sigs = all_broadcast(in, out);
  for (int a = 0; a + 1 < in[1].shape.rank(); ++a)
    sigs.push_back({a == 0 ? "data" : "split" + std::to_string(a), {Sbp::B(), Sbp::S(a), Sbp::S(a)}, {Sbp::S(a)}});
  return sigs;
}

Cost softmax_like_cost(std::span<const TensorDesc> in, std::span<const TensorDesc> out, const TensorDesc& logits) {
  Cost c = default_cost(in, out, 0);
  c.flops = 5 * static_cast<double>(logits.numel());
  return c;
}

std::vector<Sample> cross_entropy_samples() {
  return {{"2d", {}, {{TensorDesc{Shape{3, 5}}, 0, -3, 3}, {TensorDesc{Shape{3}, DType::i64}, 5}}},
          {"3d", {}, {{TensorDesc{Shape{2, 3, 4}}, 0, -3, 3}, {TensorDesc{Shape{2, 3}, DType::i32}, 4}}}};
}
std::vector<BadSample> cross_entropy_bad() {
  return {{"targets_shape", {}, {TensorDesc{Shape{2, 4, 10}}, TensorDesc{Shape{2, 5}, DType::i32}},
           "targets have shape [2, 5] but logits [2, 4, 10] need targets [2, 4]"},
          {"float_targets", {}, {TensorDesc{Shape{2, 10}}, TensorDesc{Shape{2}}}, "integer class ids"},
          {"no_class_axis", {}, {TensorDesc{Shape{4}}, TensorDesc{Shape{4}, DType::i32}}, "no class axis"},
          {"int_logits", {}, {TensorDesc{Shape{2, 3}, DType::i32}, TensorDesc{Shape{2}, DType::i32}},
           "logits must be floating point"}};
}

// ---- mse_loss ---------------------------------------------------------------------------------------------
std::vector<TensorDesc> infer_mse(const Attrs&, std::span<const TensorDesc> in) {
  if (!is_float(in[0].dtype) || in[1].dtype != in[0].dtype)
    throw OpError("mse_loss needs two floating-point inputs of one dtype, got " + in[0].str() + " and " + in[1].str());
  if (in[0].shape != in[1].shape)
    throw OpError("input shapes " + in[0].shape.str() + " and " + in[1].shape.str() + " differ",
                  "mse_loss compares a prediction with a target of the same shape");
  return {TensorDesc{Shape{}, in[0].dtype}};
}

size_t mse_workspace(const Attrs&, std::span<const TensorDesc> in, std::span<const TensorDesc>) {
  return static_cast<size_t>(in[0].shape[0]) * sizeof(double);  // one partial sum per sample
}

// a, b: (B, M) row-major, M = elements per sample. loss = sum (a - b)^2 / (B * M).
void mse_cpu(const KernelCtx& ctx, const Attrs&, std::span<const Tensor> in, std::span<const Tensor> out) {
  int64_t rows = in[0].shape()[0], n = in[0].numel(), m = rows > 0 ? n / rows : 0;
  double* row_sum = workspace_doubles(ctx, rows);
  dispatch_float(in[0].dtype(), [&]<typename T>() {
    const T *a = in[0].data<T>(), *b = in[1].data<T>();
    parallel_for(rows, std::max<int64_t>(1, 8192 / std::max<int64_t>(m, 1)), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        double s = 0;
        for (int64_t j = r * m; j < (r + 1) * m; ++j) {
          double e = static_cast<double>(a[j]) - b[j];
          s += e * e;
        }
        row_sum[r] = s;
      }
    });
    double total = 0;
    for (int64_t r = 0; r < rows; ++r) total += row_sum[r];
    out[0].data<T>()[0] = static_cast<T>(total / static_cast<double>(n));
  });
}

// mse_loss_grad(dloss, a, b) -> (da, db): da = 2 (a - b) dloss / N, db = -da.
std::vector<TensorDesc> infer_mse_grad(const Attrs&, std::span<const TensorDesc> in) { return {in[1], in[2]}; }

void mse_grad_cpu(const KernelCtx&, const Attrs&, std::span<const Tensor> in, std::span<const Tensor> out) {
  int64_t n = in[1].numel();
  dispatch_float(in[1].dtype(), [&]<typename T>() {
    const T *a = in[1].data<T>(), *b = in[2].data<T>();
    T *da = out[0].data<T>(), *db = out[1].data<T>();
    double scale = 2.0 * static_cast<double>(in[0].data<T>()[0]) / static_cast<double>(n);
    parallel_for(n, 1 << 14, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        T g = static_cast<T>((static_cast<double>(a[i]) - b[i]) * scale);
        da[i] = g;
        db[i] = -g;
      }
    });
  });
}

void mse_grad_rule(GradCtx& c) {
  if (!c.dout[0].valid() || !(c.needs[0] || c.needs[1])) return;
  auto g = c.g.emit("mse_loss_grad", {}, {c.dout[0], c.inputs[0], c.inputs[1]});
  for (size_t i = 0; i < 2; ++i)
    if (c.needs[i]) c.din[i] = g[i];
}

// Both inputs S(a) on any axis; the loss is P with the rescaling described at the top (N_k = shard size).
std::vector<SplitSignature> mse_splits(const Attrs&, std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
  return position_splits(in, out, in[0].shape.rank());
}

// dloss B, a and b S(a): da, db S(a); each shard divides by its own N_k (the executor feeds dloss * N_k / N).
std::vector<SplitSignature> mse_grad_splits(const Attrs&, std::span<const TensorDesc> in,
                                            std::span<const TensorDesc> out) {
  auto sigs = all_broadcast(in, out);
  for (int a = 0; a < in[1].shape.rank(); ++a)
    sigs.push_back({a == 0 ? "data" : "split" + std::to_string(a), {Sbp::B(), Sbp::S(a), Sbp::S(a)},
                    {Sbp::S(a), Sbp::S(a)}});
  return sigs;
}

std::vector<Sample> mse_samples() {
  return {{"3d", {}, {{TensorDesc{Shape{2, 3, 4}}}, {TensorDesc{Shape{2, 3, 4}}}}},
          {"2d", {}, {{TensorDesc{Shape{4, 5}}, 0, -2, 2}, {TensorDesc{Shape{4, 5}}}}}};
}
std::vector<BadSample> mse_bad() {
  return {{"shapes", {}, {TensorDesc{Shape{2, 3}}, TensorDesc{Shape{2, 4}}}, "input shapes [2, 3] and [2, 4] differ"},
          {"dtypes", {}, {TensorDesc{Shape{2, 3}}, TensorDesc{Shape{2, 3}, DType::f64}}, "of one dtype"},
          {"int", {}, {TensorDesc{Shape{2, 3}, DType::i32}, TensorDesc{Shape{2, 3}, DType::i32}}, "floating-point"}};
}

// ---- accuracy -----------------------------------------------------------------------------------------------
std::vector<TensorDesc> infer_accuracy(const Attrs&, std::span<const TensorDesc> in) {
  check_logits_targets(in);
  return {TensorDesc{Shape{}, DType::f32}};
}

// Fraction of positions n with argmax_j logits[n, j] == t_n (first maximum on ties). A target outside
// [0, C) never matches; it is not an error for a metric.
void accuracy_cpu(const KernelCtx& ctx, const Attrs&, std::span<const Tensor> in, std::span<const Tensor> out) {
  int64_t c = in[0].shape().back(), n = in[1].numel();
  double* hit = workspace_doubles(ctx, n);
  dispatch_float(in[0].dtype(), [&]<typename T>() {
    const T* x = in[0].data<T>();
    parallel_for(n, std::max<int64_t>(1, 4096 / c), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T* xr = x + r * c;
        int64_t best = 0;
        for (int64_t j = 1; j < c; ++j)
          if (xr[j] > xr[best]) best = j;
        hit[r] = best == cpu::int_at(in[1], r) ? 1.0 : 0.0;
      }
    });
  });
  double total = 0;
  for (int64_t r = 0; r < n; ++r) total += hit[r];
  out[0].data<float>()[0] = static_cast<float>(total / static_cast<double>(n));
}

std::vector<Sample> accuracy_samples() {
  return {{"2d", {}, {{TensorDesc{Shape{6, 3}}}, {TensorDesc{Shape{6}, DType::i64}, 3}}},
          {"3d", {}, {{TensorDesc{Shape{2, 4, 5}}}, {TensorDesc{Shape{2, 4}, DType::i32}, 5}}}};
}
std::vector<BadSample> accuracy_bad() {
  return {{"targets_shape", {}, {TensorDesc{Shape{3, 10}}, TensorDesc{Shape{4}, DType::i64}}, "targets have shape [4]"},
          {"float_targets", {}, {TensorDesc{Shape{3, 10}}, TensorDesc{Shape{3}}}, "integer class ids"}};
}

}  // namespace

void register_loss(Registry& r) {
  {
    OpDef d;
    d.name = "cross_entropy";
    // 16-bit logits are read as they are (the row sums run in double, the loss is f32): no f32 copy of the
    // (N, C) logits, which for a GPT's vocabulary is the largest activation; the gradient is in the logits' dtype.
    d.autocast = Autocast::Follow;
    d.doc = "mean over all positions of -log softmax(logits)[target]; logits [..., C], integer targets [...]";
    d.min_inputs = d.max_inputs = 2;
    d.nondiff_inputs = {1};
    d.infer = infer_cross_entropy;
    d.grad = cross_entropy_grad_rule;
    d.splits = cross_entropy_splits;
    d.cost = [](const Attrs&, std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
      return softmax_like_cost(in, out, in[0]);
    };
    d.workspace = rows_workspace;
    d.int_bound = targets_bound;
    d.cpu = cross_entropy_cpu;
    d.samples = cross_entropy_samples;
    d.bad_samples = cross_entropy_bad;
    r.add(d);
  }
  {
    OpDef d;
    d.name = "cross_entropy_grad";
    d.doc = "gradient of cross_entropy: (dloss, logits, targets) -> (softmax - onehot) * dloss / N";
    d.internal = true;
    d.differentiable = false;
    d.min_inputs = d.max_inputs = 3;
    d.infer = infer_cross_entropy_grad;
    d.splits = cross_entropy_grad_splits;
    d.cost = [](const Attrs&, std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
      return softmax_like_cost(in, out, in[1]);
    };
    d.cpu = cross_entropy_grad_cpu;
    r.add(d);
  }
  {
    OpDef d;
    d.name = "mse_loss";
    d.doc = "mean over all elements of (a - b)^2";
    d.min_inputs = d.max_inputs = 2;
    d.infer = infer_mse;
    d.grad = mse_grad_rule;
    d.splits = mse_splits;
    d.cost = [](const Attrs&, std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
      Cost c = default_cost(in, out, 0);
      c.flops = 3 * static_cast<double>(in[0].numel());
      return c;
    };
    d.workspace = mse_workspace;
    d.cpu = mse_cpu;
    d.samples = mse_samples;
    d.bad_samples = mse_bad;
    r.add(d);
  }
  {
    OpDef d;
    d.name = "mse_loss_grad";
    d.doc = "gradient of mse_loss: (dloss, a, b) -> (2 (a - b) dloss / N, -2 (a - b) dloss / N)";
    d.internal = true;
    d.differentiable = false;
    d.min_inputs = d.max_inputs = 3;
    d.infer = infer_mse_grad;
    d.splits = mse_grad_splits;
    d.cost = [](const Attrs&, std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
      return default_cost(in, out, 2);
    };
    d.cpu = mse_grad_cpu;
    r.add(d);
  }
  {
    OpDef d;
    d.name = "accuracy";
    d.autocast = Autocast::Follow;
    d.doc = "metric: fraction of positions whose argmax over the last axis equals the integer target (f32)";
    d.min_inputs = d.max_inputs = 2;
    d.differentiable = false;
    d.nondiff_inputs = {0, 1};
    d.infer = infer_accuracy;
    d.splits = [](const Attrs&, std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
      return position_splits(in, out, in[0].shape.rank() - 1);  // P with the rescaling described at the top
    };
    d.cost = [](const Attrs&, std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
      Cost c = default_cost(in, out, 0);
      c.flops = static_cast<double>(in[0].numel());  // one comparison per logit
      return c;
    };
    d.workspace = rows_workspace;
    d.int_bound = targets_bound;
    d.cpu = accuracy_cpu;
    d.samples = accuracy_samples;
    d.bad_samples = accuracy_bad;
    r.add(d);
  }
}

}  // namespace braid::ops
