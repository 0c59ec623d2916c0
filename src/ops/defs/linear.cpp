// Linear family: linear (y = x W^T + b, PyTorch's nn.Linear, any rank >= 2) and the internal gradient ops
// linear_dx (dx = dy W), linear_dw (dW = dy^T x over all leading axes), linear_db (db = dy summed over all
// leading axes). The attention family reuses these three for its projections.
// Kernels read every size from the tensors they get (never from `out`), so they run unchanged on the shards
// of each split signature. Layout: x (M, in) row-major after flattening the leading axes; W (out, in).
#include <cmath>
#include <map>
#include <utility>

#include "ops/cpu/fused.h"
#include "ops/cpu/kernel_util.h"
#include "ops/registry.h"
#include "ops/tie.h"

namespace braid::ops {
namespace {

using cpu::dispatch_float;

std::string str(int64_t v) { return std::to_string(v); }

// ---- linear ---------------------------------------------------------------------------------------------
void check_linear_input(const TensorDesc& x) {
  if (x.shape.rank() < 2)
    throw OpError("linear needs a feature axis, but its input " + x.str() + " holds one scalar per sample",
                  "give the input a per-sample shape such as [1] or [features]");
  if (!is_float(x.dtype))
    throw OpError("linear input must be floating point, got " + x.str(),
                  "integer ids go through an embedding layer first");
}

// `out` is optional in the attribute list only so that `tie` may leave it out: the tie rule fills it from the tied
// weight before parameters and inference run; without `tie` it is required, as before.
void linear_canonicalize(Attrs& a) {
  if (!a.has("out") && !a.has("tie"))
    throw OpError("op 'linear' needs attribute 'out'", "or `tie: LAYER` to use another layer's weight");
}

// tie: the weight is the named layer's [rows, cols]; out is its rows (given or left out), the input has cols
// features, and the layer has no bias of its own.
void linear_tie(Attrs& a, std::span<const TensorDesc> in, const TensorDesc& w) {
  const std::string who = "tie: '" + a.s("tie") + "'";
  if (w.shape.rank() != 2)
    throw OpError(who + " has weight " + w.shape.str() + ", not a matrix [out, in]",
                  "tie to an embedding ([num, dim]) or a linear layer ([out, in])");
  if (a.b("bias"))
    throw OpError(who + " needs bias: false", "a tied linear has no bias of its own; write bias: false");
  if (!a.has("out")) a.set("out", w.shape[0]);
  if (a.i("out") != w.shape[0])
    throw OpError("out = " + str(a.i("out")) + " but the tied weight " + w.shape.str() + " of '" + a.s("tie") + "' has " +
                      str(w.shape[0]) + " rows",
                  "leave out `out` (it is the tied weight's rows) or make it " + str(w.shape[0]));
  check_linear_input(in[0]);
  if (in[0].shape.back() != w.shape[1])
    throw OpError("the input has " + str(in[0].shape.back()) + " features but the tied weight " + w.shape.str() +
                      " of '" + a.s("tie") + "' has " + str(w.shape[1]) + " columns",
                  "the input size must equal the tied weight's columns (an embedding's dim)");
}

// nn.Linear's init: kaiming_uniform(a = sqrt(5)) on the weight and uniform on the bias, both bound 1/sqrt(in).
std::vector<ParamSpec> linear_params(const Attrs& a, std::span<const TensorDesc> in) {
  check_linear_input(in[0]);
  int64_t fin = in[0].shape.back(), fout = a.i("out");
  double bound = 1.0 / std::sqrt(static_cast<double>(fin));
  const DType t = master_dtype(in[0].dtype);  // 16-bit inputs: f32 master weights
  std::vector<ParamSpec> p{{"weight", {Shape{fout, fin}, t}, InitSpec::uniform(-bound, bound)}};
  if (a.b("bias")) p.push_back({"bias", {Shape{fout}, t}, InitSpec::uniform(-bound, bound)});
  return p;
}

std::vector<TensorDesc> linear_infer(const Attrs& a, std::span<const TensorDesc> in) {
  const TensorDesc& x = in[0];
  check_linear_input(x);
  int64_t fin = x.shape.back(), fout = a.i("out");
  size_t want = a.b("bias") ? 3 : 2;
  if (in.size() != want)
    throw OpError("linear with bias=" + std::string(a.b("bias") ? "true" : "false") + " takes " + str(want) +
                  " tensors (input and parameters), got " + str(static_cast<int64_t>(in.size())));
  const TensorDesc& w = in[1];
  if (w.shape.rank() != 2 || w.shape[0] != fout)
    throw OpError("linear weight is " + w.str() + " but out = " + str(fout) + " needs [" + str(fout) + ", in]");
  if (w.shape[1] != fin)
    throw OpError("input " + x.str() + " has " + str(fin) + " features but the weight " + w.str() + " expects " +
                      str(w.shape[1]),
                  "the previous layer produces " + str(fin) + " features; the weight was made for " + str(w.shape[1]));
  if (w.dtype != master_dtype(x.dtype))
    throw OpError("linear weight " + w.str() + " and input " + x.str() + " differ in dtype");
  if (in.size() == 3 && (in[2].shape != Shape{fout} || in[2].dtype != w.dtype))
    throw OpError("linear bias is " + in[2].str() + " but out = " + str(fout) + " needs [" + str(fout) + "]");
  Shape y = x.shape;
  y[y.rank() - 1] = fout;
  return {TensorDesc{y, x.dtype}};
}

void linear_cpu(const KernelCtx&, const Attrs&, std::span<const Tensor> in, std::span<const Tensor> out) {
  dispatch_float(out[0].dtype(), [&]<typename T>() {
    const Tensor& w = in[1];
    int64_t fout = w.shape()[0], fin = w.shape()[1];
    cpu::affine_rows<T>(in[0].data<T>(), in[0].numel() / fin, fin, w.data<T>(), in.size() == 3 ? in[2].data<T>() : nullptr,
                   fout, out[0].data<T>());
  });
}

}  // namespace

const TieRule* tie_rule(const OpDef& op) {
  static const TieRule linear{"weight", linear_tie};
  static const OpDef* const linear_op = &Registry::get().at("linear");
  return &op == linear_op ? &linear : nullptr;
}

void cpu::linear_activation(const Attrs&, Act act, std::span<const Tensor> in, const Tensor& z, const Tensor& y) {
  BRAID_ASSERT(z.dtype() == DType::f32 && y.dtype() == DType::f32, "linear_activation is float32 only");
  const Tensor& w = in[1];
  const int64_t fout = w.shape()[0], fin = w.shape()[1], m = in[0].numel() / fin;
  float* zp = z.data<float>();
  struct Ctx {
    Act act;
    const float* z;
    float* y;
    int64_t ld;
  } ctx{act, zp, y.data<float>(), fout};
  auto epilogue = [](void* p, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    auto* c = static_cast<Ctx*>(p);
    if (c0 == 0 && c1 == c->ld) {  // whole rows: one contiguous run
      cpu::activation(c->act, c->z + r0 * c->ld, c->y + r0 * c->ld, (r1 - r0) * c->ld);
      return;
    }
    for (int64_t r = r0; r < r1; ++r)
      cpu::activation(c->act, c->z + r * c->ld + c0, c->y + r * c->ld + c0, c1 - c0);
  };
  const cpu::GemmEpilogue ep{epilogue, &ctx};
  cpu::affine_rows<float>(in[0].data<float>(), m, fin, w.data<float>(), in.size() == 3 ? in[2].data<float>() : nullptr, fout,
                     zp, &ep);
}

void cpu::linear_dw_db(std::span<const Tensor> in, const Tensor& dw, const Tensor& db) {
  BRAID_ASSERT(dw.dtype() == DType::f32 && db.dtype() == DType::f32, "linear_dw_db is float32 only");
  const int64_t fout = dw.shape()[0], fin = dw.shape()[1], m = in[0].numel() / fout;
  struct Ctx {
    const float* dy;
    float* db;
    int64_t m, fout;
  } ctx{in[0].data<float>(), db.data<float>(), m, fout};
  // Rows r0..r1 of dW are features r0..r1: their db entries, once (by the block holding column 0).
  auto epilogue = [](void* p, int64_t r0, int64_t r1, int64_t c0, int64_t) {
    auto* c = static_cast<Ctx*>(p);
    if (c0 != 0) return;
    double acc[256];
    for (int64_t j0 = r0; j0 < r1; j0 += 256) {
      const int64_t j1 = std::min(r1, j0 + 256);
      for (int64_t j = j0; j < j1; ++j) acc[j - j0] = 0;
      for (int64_t r = 0; r < c->m; ++r)
        for (int64_t j = j0; j < j1; ++j) acc[j - j0] += c->dy[r * c->fout + j];
      for (int64_t j = j0; j < j1; ++j) c->db[j] = static_cast<float>(acc[j - j0]);
    }
  };
  cpu::gemm(true, false, fout, fin, m, 1.0f, in[0].data<float>(), fout, in[1].data<float>(), fin, 0.0f,
            dw.data<float>(), fin, cpu::GemmEpilogue{epilogue, &ctx});
}

void cpu::linear_dx_activation_grad(Act act, std::span<const Tensor> in, const Tensor& dh, const Tensor& z,
                                    const Tensor& dz) {
  BRAID_ASSERT(dh.dtype() == DType::f32 && z.dtype() == DType::f32 && dz.dtype() == DType::f32,
               "linear_dx_activation_grad is float32 only");
  const int64_t fout = in[1].shape()[0], fin = in[1].shape()[1], m = in[0].numel() / fout;
  struct Ctx {
    Act act;
    const float* dh;
    const float* z;
    float* dz;
    int64_t ld;
  } ctx{act, dh.data<float>(), z.data<float>(), dz.data<float>(), fin};
  auto epilogue = [](void* p, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    auto* c = static_cast<Ctx*>(p);
    if (c0 == 0 && c1 == c->ld) {  // whole rows: one contiguous run
      const int64_t at = r0 * c->ld;
      cpu::activation_grad(c->act, c->dh + at, c->z + at, c->dz + at, (r1 - r0) * c->ld);
      return;
    }
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t at = r * c->ld + c0;
      cpu::activation_grad(c->act, c->dh + at, c->z + at, c->dz + at, c1 - c0);
    }
  };
  cpu::gemm(false, false, m, fin, fout, 1.0f, in[0].data<float>(), fout, in[1].data<float>(), fin, 0.0f,
            dh.data<float>(), fin, cpu::GemmEpilogue{epilogue, &ctx});
}

const cpu::CpuFusion* cpu::cpu_fusion(const OpDef& head, const OpDef& tail) {
  static const CpuFusion lin_act{FusionLink::TailReadsHeadOutput,
                                 [](const KernelCtx&, const Attrs& ha, const OpDef& t, const Attrs& ta,
                                    std::span<const Tensor> in, std::span<const Tensor>, const Tensor& z,
                                    const Tensor& y) { linear_activation(ha, activation_of(t, ta), in, z, y); }};
  static const CpuFusion dw_db{FusionLink::SameFirstInput,
                               [](const KernelCtx&, const Attrs&, const OpDef&, const Attrs&, std::span<const Tensor> in,
                                  std::span<const Tensor>, const Tensor& dw, const Tensor& db) { linear_dw_db(in, dw, db); }};
  static const CpuFusion dx_act{FusionLink::TailReadsHeadOutput,
                                [](const KernelCtx&, const Attrs&, const OpDef& t, const Attrs& ta,
                                   std::span<const Tensor> in, std::span<const Tensor> tail_in, const Tensor& dh,
                                   const Tensor& dz) {
                                  linear_dx_activation_grad(activation_of(t, ta), in, dh, tail_in[1], dz);
                                }};
  static const CpuFusion conv_act{FusionLink::TailReadsHeadOutput,
                                  [](const KernelCtx& ctx, const Attrs& ha, const OpDef& t, const Attrs& ta,
                                     std::span<const Tensor> in, std::span<const Tensor>, const Tensor& z,
                                     const Tensor& y) { conv2d_activation(ctx, ha, activation_of(t, ta), in, z, y); }};
  // The table, filled once from the registry: pairs of definitions, never of names.
  static const std::map<std::pair<const OpDef*, const OpDef*>, const CpuFusion*> table = [] {
    const Registry& r = Registry::get();
    std::map<std::pair<const OpDef*, const OpDef*>, const CpuFusion*> t;
    for (const OpDef* d : r.all()) {
      if (d->activation < 0) continue;
      if (d->activation_grad) {
        t[{&r.at("linear_dx"), d}] = &dx_act;
      } else {
        t[{&r.at("linear"), d}] = &lin_act;
        t[{&r.at("conv2d"), d}] = &conv_act;
      }
    }
    t[{&r.at("linear_dw"), &r.at("linear_db")}] = &dw_db;
    return t;
  }();
  auto it = table.find({&head, &tail});
  return it == table.end() ? nullptr : it->second;
}

namespace {

// The weight and bias gradients first, then the input's: x (read by dW only) dies before dx is born, so that
// backward never holds x, dy and dx at once (a recomputed input lives only for its dW).
void linear_grad(GradCtx& c) {
  ValueId dy = c.dout[0];
  if (!dy.valid()) return;
  if (c.needs[1]) c.din[1] = c.g.emit("linear_dw", {}, {dy, c.inputs[0]})[0];
  if (c.inputs.size() == 3 && c.needs[2]) c.din[2] = c.g.emit("linear_db", {}, {dy})[0];
  if (c.needs[0]) c.din[0] = c.g.emit("linear_dx", {}, {dy, c.inputs[1]})[0];
}

// Split signatures of linear (x, W[, b]) -> y. `last` is y's feature axis.
std::vector<SplitSignature> linear_splits(const Attrs&, std::span<const TensorDesc> in,
                                          std::span<const TensorDesc> out) {
  bool bias = in.size() == 3;
  int last = out[0].shape.rank() - 1;
  auto with_bias = [&](std::vector<Sbp> v, Sbp b) {
    if (bias) v.push_back(b);
    return v;
  };
  auto sigs = all_broadcast(in, out);
  // data: rows split along the batch (or, "rows<a>", any other leading axis); parameters replicated.
  for (int ax = 0; ax < last; ++ax)
    sigs.push_back({ax == 0 ? "data" : "rows" + std::to_string(ax), with_bias({Sbp::S(ax), Sbp::B()}, Sbp::B()),
                    {Sbp::S(ax)}});
  // column (Megatron): each device holds out/n rows of W and of b and produces its slice of the features.
  sigs.push_back({"column", with_bias({Sbp::B(), Sbp::S(0)}, Sbp::S(0)), {Sbp::S(last)}});
  // row (Megatron): each device holds in/n columns of W and the matching input features and produces a
  // partial sum. The bias is P: one device holds it and the others zeros, so it is added exactly once.
  sigs.push_back({"row", with_bias({Sbp::S(last), Sbp::S(1)}, Sbp::P()), {Sbp::P()}});
  // partial: y is affine in (x, b), so shares of x and b give shares of y (W replicated).
  sigs.push_back({"partial", with_bias({Sbp::P(), Sbp::B()}, Sbp::P()), {Sbp::P()}});
  return sigs;
}

Cost linear_cost(const Attrs&, std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
  Cost c = default_cost(in, out, 0);
  double m = static_cast<double>(in[0].numel() / in[0].shape.back());
  double fin = static_cast<double>(in[1].shape[1]), fout = static_cast<double>(in[1].shape[0]);
  c.flops = 2 * m * fin * fout + (in.size() == 3 ? m * fout : 0);
  return c;
}

std::vector<Sample> linear_samples() {
  auto s = [](const std::string& name, int64_t out, bool bias, Shape x) {
    return Sample{name, {{"out", out}, {"bias", bias}}, {{TensorDesc{std::move(x)}}}};
  };
  return {s("2d_bias", 5, true, Shape{3, 4}), s("2d_nobias", 3, false, Shape{4, 6}),
          s("3d_bias", 6, true, Shape{2, 3, 4}), s("3d_nobias", 4, false, Shape{2, 3, 5}),
          s("4d_bias", 2, true, Shape{2, 2, 3, 3})};
}

std::vector<BadSample> linear_bad() {
  return {{"scalar_per_sample", {{"out", int64_t{4}}}, {TensorDesc{Shape{8}}}, "needs a feature axis"},
          {"int_input", {{"out", int64_t{4}}}, {TensorDesc{Shape{2, 3}, DType::i32}}, "must be floating point"},
          {"no_out", {}, {TensorDesc{Shape{2, 3}}}, "needs attribute 'out'"},
          {"zero_out", {{"out", int64_t{0}}}, {TensorDesc{Shape{2, 3}}}, "must be at least 1"}};
}

// ---- linear_dx(dy, W) -> dx = dy W ---------------------------------------------------------------------
std::vector<TensorDesc> dx_infer(const Attrs&, std::span<const TensorDesc> in) {
  BRAID_ASSERT(in[0].shape.back() == in[1].shape[0], "linear_dx: dy ", in[0].str(), " vs W ", in[1].str());
  Shape s = in[0].shape;
  s[s.rank() - 1] = in[1].shape[1];
  return {TensorDesc{s, in[0].dtype}};
}

void dx_cpu(const KernelCtx&, const Attrs&, std::span<const Tensor> in, std::span<const Tensor> out) {
  dispatch_float(out[0].dtype(), [&]<typename T>() {
    int64_t fout = in[1].shape()[0], fin = in[1].shape()[1], m = in[0].numel() / fout;
    cpu::gemm(false, false, m, fin, fout, T(1), in[0].data<T>(), fout, in[1].data<T>(), fin, T(0),
              out[0].data<T>(), fin);
  });
}

std::vector<SplitSignature> dx_splits(const Attrs&, std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
  int last = out[0].shape.rank() - 1;
  auto sigs = all_broadcast(in, out);
  for (int ax = 0; ax < last; ++ax)  // rows of dy split, W replicated
    sigs.push_back({ax == 0 ? "data" : "rows" + std::to_string(ax), {Sbp::S(ax), Sbp::B()}, {Sbp::S(ax)}});
  sigs.push_back({"column", {Sbp::S(last), Sbp::S(0)}, {Sbp::P()}});     // backward of column: sum over out
  sigs.push_back({"row", {Sbp::B(), Sbp::S(1)}, {Sbp::S(last)}});        // backward of row: slices of in
  sigs.push_back({"partial", {Sbp::P(), Sbp::B()}, {Sbp::P()}});         // linear in dy
  return sigs;
}

// ---- linear_dw(dy, x) -> dW = dy^T x ---------------------------------------------------------------------
std::vector<TensorDesc> dw_infer(const Attrs&, std::span<const TensorDesc> in) {
  BRAID_ASSERT(in[0].numel() / in[0].shape.back() == in[1].numel() / in[1].shape.back(), "linear_dw: dy ",
               in[0].str(), " vs x ", in[1].str());
  return {TensorDesc{Shape{in[0].shape.back(), in[1].shape.back()}, master_dtype(in[0].dtype)}};
}

void dw_cpu(const KernelCtx&, const Attrs&, std::span<const Tensor> in, std::span<const Tensor> out) {
  dispatch_float(out[0].dtype(), [&]<typename T>() {
    int64_t fout = out[0].shape()[0], fin = out[0].shape()[1], m = in[0].numel() / fout;
    cpu::gemm(true, false, fout, fin, m, T(1), in[0].data<T>(), fout, in[1].data<T>(), fin, T(0), out[0].data<T>(),
              fin);
  });
}

std::vector<SplitSignature> dw_splits(const Attrs&, std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
  int last = in[0].shape.rank() - 1;
  auto sigs = all_broadcast(in, out);
  for (int ax = 0; ax < last; ++ax)  // each device sums its rows: partial sums of dW
    sigs.push_back({ax == 0 ? "data" : "rows" + std::to_string(ax), {Sbp::S(ax), Sbp::S(ax)}, {Sbp::P()}});
  sigs.push_back({"column", {Sbp::S(last), Sbp::B()}, {Sbp::S(0)}});  // rows of dW
  sigs.push_back({"row", {Sbp::B(), Sbp::S(last)}, {Sbp::S(1)}});     // columns of dW
  sigs.push_back({"partial", {Sbp::P(), Sbp::B()}, {Sbp::P()}});      // linear in dy
  return sigs;
}

// ---- linear_db(dy) -> db = sum of dy over all leading axes -------------------------------------------------
std::vector<TensorDesc> db_infer(const Attrs&, std::span<const TensorDesc> in) {
  return {TensorDesc{Shape{in[0].shape.back()}, master_dtype(in[0].dtype)}};
}

size_t db_workspace(const Attrs&, std::span<const TensorDesc>, std::span<const TensorDesc> out) {
  return static_cast<size_t>(out[0].numel()) * sizeof(double);
}

// Rows are summed in order into double accumulators (deterministic for any thread count: threads own
// disjoint column ranges).
void db_cpu(const KernelCtx& ctx, const Attrs&, std::span<const Tensor> in, std::span<const Tensor> out) {
  dispatch_float(out[0].dtype(), [&]<typename T>() {
    int64_t fout = out[0].numel(), m = in[0].numel() / fout;
    BRAID_ASSERT(ctx.workspace_bytes >= static_cast<size_t>(fout) * sizeof(double), "linear_db: workspace too small");
    auto* acc = static_cast<double*>(ctx.workspace);
    const T* dy = in[0].data<T>();
    T* db = out[0].data<T>();
    int64_t grain = std::max<int64_t>(16, (1 << 14) / std::max<int64_t>(m, 1));
    parallel_for(fout, grain, [&](int64_t j0, int64_t j1) {
      for (int64_t j = j0; j < j1; ++j) acc[j] = 0;
      for (int64_t r = 0; r < m; ++r)
        for (int64_t j = j0; j < j1; ++j) acc[j] += dy[r * fout + j];
      for (int64_t j = j0; j < j1; ++j) db[j] = static_cast<T>(acc[j]);
    });
  });
}

std::vector<SplitSignature> db_splits(const Attrs&, std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
  int last = in[0].shape.rank() - 1;
  auto sigs = all_broadcast(in, out);
  for (int ax = 0; ax < last; ++ax)
    sigs.push_back({ax == 0 ? "data" : "rows" + std::to_string(ax), {Sbp::S(ax)}, {Sbp::P()}});
  sigs.push_back({"column", {Sbp::S(last)}, {Sbp::S(0)}});
  sigs.push_back({"partial", {Sbp::P()}, {Sbp::P()}});
  return sigs;
}

// Costs of the gradient ops: 2 M out in for dx and dW (numel(dy) = M out); M out adds for db.
Cost dx_cost(const Attrs&, std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
  Cost c = default_cost(in, out, 0);
  c.flops = 2 * static_cast<double>(in[0].numel()) * static_cast<double>(in[1].shape[1]);
  return c;
}
Cost dw_cost(const Attrs&, std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
  Cost c = default_cost(in, out, 0);
  c.flops = 2 * static_cast<double>(in[0].numel()) * static_cast<double>(in[1].shape.back());
  return c;
}
Cost db_cost(const Attrs&, std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
  Cost c = default_cost(in, out, 0);
  c.flops = static_cast<double>(in[0].numel());
  return c;
}

OpDef internal_def(const std::string& name, std::string doc, int inputs, InferFn infer, CpuKernel k, SplitFn s,
                   CostFn cost) {
  OpDef d;
  d.name = name;
  d.doc = std::move(doc);
  d.internal = true;
  d.differentiable = false;
  d.min_inputs = d.max_inputs = inputs;
  d.infer = infer;
  d.cpu = k;
  d.splits = s;
  d.cost = cost;
  return d;
}

}  // namespace

void register_linear(Registry& r) {
  OpDef d;
  d.name = "linear";
  d.autocast = Autocast::Half;
  d.doc = "y = x W^T + b over the last axis (nn.Linear); weight [out, in], bias [out]";
  d.attrs = {{"out", AttrKind::Int, std::nullopt, true, {}, 0, true, false,
              "output features (required unless `tie` gives them)"},
             {"bias", AttrKind::Bool, AttrValue(true), false, {}, 0, false, false, "add a learned bias"},
             {"tie", AttrKind::String, std::nullopt, true, {}, 0, false, false,
              "use the named layer's weight (an embedding's [num, dim] or a linear's) instead of one of its own; "
              "needs bias: false, takes no init"}};
  d.canonicalize = linear_canonicalize;
  d.params = linear_params;
  d.infer = linear_infer;
  d.grad = linear_grad;
  d.splits = linear_splits;
  d.cost = linear_cost;
  d.cpu = linear_cpu;
  d.samples = linear_samples;
  d.bad_samples = linear_bad;
  d.torch_rtol = 1e-5;  // one GEMM: fp32 rounding of a dot product of `in` terms, as PyTorch's
  d.torch_atol = 1e-6;
  d.gradcheck_tol = 1e-6;
  r.add(d);
  r.add(internal_def("linear_dx", "gradient of linear w.r.t. its input: dy W", 2, dx_infer, dx_cpu, dx_splits,
                     dx_cost));
  r.add(internal_def("linear_dw", "gradient of linear w.r.t. its weight: dy^T x over all leading axes", 2, dw_infer,
                     dw_cpu, dw_splits, dw_cost));
  OpDef db = internal_def("linear_db", "gradient of linear w.r.t. its bias: dy summed over all leading axes", 1,
                          db_infer, db_cpu, db_splits, db_cost);
  db.workspace = db_workspace;
  r.add(db);
}

}  // namespace braid::ops
