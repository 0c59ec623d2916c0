// Elementwise ops: add and mul (n-ary, NumPy broadcasting), the activations relu, gelu (exact and tanh),
// tanh and sigmoid, and the internal helpers their gradients emit: reduce_like (sum a gradient down to a
// broadcast input's shape), <act>_grad and ones_like (the seed of the loss gradient).
// Math follows PyTorch: gelu(x) = x * Phi(x) ("none") or 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
// In float, tanh and exp are cpu/fast_math.h's branch-free versions (1 ulp, vectorisable); double uses std::.
#include <cmath>
#include <cstring>

#include "core/cpu_isa.h"
#include "ops/cpu/fast_math.h"
#include "ops/activation.h"
#include "ops/cpu/kernel_util.h"
#include "ops/registry.h"

namespace braid::ops {
namespace {

using cpu::dispatch_float;

// ---- shared split signatures ----------------------------------------------------------------------------
// Same-shape elementwise: every axis may be split the same way on all operands; or everything replicated.
std::vector<SplitSignature> same_shape_splits(std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
  std::vector<SplitSignature> sigs = all_broadcast(in, out);
  for (int a = 0; a < out[0].shape.rank(); ++a) {
    bool ok = true;
    for (const auto& d : in) ok &= d.shape == out[0].shape;
    if (!ok) break;
    sigs.push_back({"split" + std::to_string(a), std::vector<Sbp>(in.size(), Sbp::S(a)),
                    std::vector<Sbp>(out.size(), Sbp::S(a))});
  }
  return sigs;
}

// Broadcasting ops split along the batch axis when every operand carries it; same-shape ops on any axis.
std::vector<SplitSignature> broadcast_splits(const Attrs&, std::span<const TensorDesc> in,
                                             std::span<const TensorDesc> out) {
  auto sigs = same_shape_splits(in, out);
  if (sigs.size() == 1) {  // shapes differ: split the batch axis of full-rank operands, broadcast the rest
    SplitSignature s{"data", {}, {Sbp::S(0)}};
    for (const auto& d : in)
      s.inputs.push_back(d.shape.rank() == out[0].shape.rank() && d.shape[0] == out[0].shape[0] ? Sbp::S(0) : Sbp::B());
    sigs.push_back(s);
  }
  return sigs;
}

// ---- add / mul ------------------------------------------------------------------------------------------
std::vector<TensorDesc> infer_broadcast(const Attrs&, std::span<const TensorDesc> in) {
  Shape out = in[0].shape;
  for (size_t k = 1; k < in.size(); ++k) {
    if (in[k].dtype != in[0].dtype)
      throw OpError("inputs have different dtypes: " + in[0].str() + " and " + in[k].str());
    auto b = cpu::broadcast_shapes(out, in[k].shape);
    if (!b)
      throw OpError("input shapes " + out.str() + " and " + in[k].shape.str() + " do not broadcast",
                    "sizes must match or be 1, aligned from the last axis");
    out = *b;
  }
  if (!is_float(in[0].dtype)) throw OpError("inputs must be floating point, got " + in[0].str());
  return {TensorDesc{out, in[0].dtype}};
}

template <typename T, bool kMul>
void nary_kernel(std::span<const Tensor> in, const Tensor& out) {
  T* y = out.data<T>();
  int64_t n = out.numel();
  bool same = true;
  for (const auto& t : in) same &= t.shape() == out.shape();
  if (same) {
    const T* x0 = in[0].data<T>();
    parallel_for(n, 1 << 14, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) y[i] = x0[i];
      for (size_t k = 1; k < in.size(); ++k) {
        const T* xk = in[k].data<T>();
        for (int64_t i = b; i < e; ++i) y[i] = kMul ? y[i] * xk[i] : y[i] + xk[i];
      }
    });
    return;
  }
  for (size_t k = 0; k < in.size(); ++k) {
    auto idx = cpu::broadcast_index(in[k].shape(), out.shape());
    const T* xk = in[k].data<T>();
    for (int64_t i = 0; i < n; ++i) {
      T v = xk[idx[static_cast<size_t>(i)]];
      y[i] = k == 0 ? v : (kMul ? y[i] * v : y[i] + v);
    }
  }
}

void add_cpu(const KernelCtx&, const Attrs&, std::span<const Tensor> in, std::span<const Tensor> out) {
  dispatch_float(out[0].dtype(), [&]<typename T>() { nary_kernel<T, false>(in, out[0]); });
}
void mul_cpu(const KernelCtx&, const Attrs&, std::span<const Tensor> in, std::span<const Tensor> out) {
  dispatch_float(out[0].dtype(), [&]<typename T>() { nary_kernel<T, true>(in, out[0]); });
}

// Sums `g` down to the shape of `like` when they differ (the gradient of a broadcast).
ValueId reduce_to(GradCtx& c, ValueId g, ValueId like) {
  if (c.g.desc(g).shape == c.g.desc(like).shape) return g;
  return c.g.emit("reduce_like", {}, {g, like})[0];
}

void add_grad(GradCtx& c) {
  if (!c.dout[0].valid()) return;
  for (size_t i = 0; i < c.inputs.size(); ++i)
    if (c.needs[i]) c.din[i] = reduce_to(c, c.dout[0], c.inputs[i]);
}

void mul_grad(GradCtx& c) {
  if (!c.dout[0].valid()) return;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    if (!c.needs[i]) continue;
    std::vector<ValueId> factors{c.dout[0]};
    for (size_t j = 0; j < c.inputs.size(); ++j)
      if (j != i) factors.push_back(c.inputs[j]);
    c.din[i] = reduce_to(c, c.g.emit("mul", {}, factors)[0], c.inputs[i]);
  }
}

Cost nary_cost(const Attrs&, std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
  return default_cost(in, out, static_cast<double>(in.size() - 1));
}

std::vector<Sample> add_samples() {
  return {{"same", {}, {{TensorDesc{Shape{2, 3, 4}}}, {TensorDesc{Shape{2, 3, 4}}}}},
          {"broadcast", {}, {{TensorDesc{Shape{2, 3, 4}}}, {TensorDesc{Shape{4}}}, {TensorDesc{Shape{2, 1, 4}}}}},
          {"three", {}, {{TensorDesc{Shape{3, 5}}}, {TensorDesc{Shape{3, 5}}}, {TensorDesc{Shape{3, 5}}}}}};
}
std::vector<BadSample> add_bad() {
  return {{"mismatch", {}, {TensorDesc{Shape{2, 3}}, TensorDesc{Shape{2, 4}}}, "do not broadcast"},
          {"dtype", {}, {TensorDesc{Shape{2, 3}}, TensorDesc{Shape{2, 3}, DType::f64}}, "different dtypes"}};
}

// ---- reduce_like: sum g over the axes where `like` broadcasts ------------------------------------------
std::vector<TensorDesc> infer_reduce_like(const Attrs&, std::span<const TensorDesc> in) {
  return {TensorDesc{in[1].shape, in[0].dtype}};
}
void reduce_like_cpu(const KernelCtx&, const Attrs&, std::span<const Tensor> in, std::span<const Tensor> out) {
  dispatch_float(out[0].dtype(), [&]<typename T>() {
    auto idx = cpu::broadcast_index(out[0].shape(), in[0].shape());
    const T* g = in[0].data<T>();
    T* y = out[0].data<T>();
    for (int64_t i = 0; i < out[0].numel(); ++i) y[i] = 0;
    for (int64_t i = 0; i < in[0].numel(); ++i) y[idx[static_cast<size_t>(i)]] += g[i];
  });
}
std::vector<SplitSignature> reduce_like_splits(const Attrs&, std::span<const TensorDesc> in,
                                               std::span<const TensorDesc> out) {
  auto sigs = all_broadcast(in, out);
  // Splitting the batch of g where `like` has no batch axis leaves partial sums.
  if (in[1].shape.rank() < in[0].shape.rank()) sigs.push_back({"data", {Sbp::S(0), Sbp::B()}, {Sbp::P()}});
  else if (in[1].shape[0] == in[0].shape[0]) sigs.push_back({"data", {Sbp::S(0), Sbp::S(0)}, {Sbp::S(0)}});
  return sigs;
}

// ---- unary activations (ops/activation.h's list) ---------------------------------------------------------
// The CPU's math for the list's formulas: in float the branch-free exp and tanh of fast_math.h (1 ulp,
// vectorisable), in double std::.
struct CpuMath {
  template <class T> static T exp(T x) { return cpu::exp_of(x); }
  template <class T> static T tanh(T x) { return cpu::tanh_of(x); }
  template <class T> static T erf(T x) { return std::erf(x); }
};

// The loops, compiled per vector width (cpu_vec, core/cpu_isa.h): gelu's tanh is arithmetic-bound, so AVX-512
// lanes cut its time roughly by the width ratio against the SSE2 baseline.
// y may be x (relu runs in place, OpDef::in_place): no __restrict; element i is read before it is written.
template <Act K, typename T>
void act_fwd_loop(const T* x, T* y, int64_t b, int64_t e) {
#pragma omp simd
  for (int64_t i = b; i < e; ++i) y[i] = ActMath<K>::template fwd<CpuMath>(x[i]);
}
// dx may be dy (OpDef::in_place): no __restrict on them; element i is read before it is written.
template <Act K, typename T>
void act_bwd_loop(const T* dy, const T* z, T* dx, int64_t b, int64_t e) {
#pragma omp simd
  for (int64_t i = b; i < e; ++i) dx[i] = dy[i] * ActMath<K>::template deriv<CpuMath>(z[i]);
}

// <act>(x) -> y.
template <Act kFirst>
void act_cpu(const KernelCtx&, const Attrs& a, std::span<const Tensor> in, std::span<const Tensor> out) {
  const Act k = activation_of(kFirst, a);
  dispatch_float(out[0].dtype(), [&]<typename T>() {
    const T* x = in[0].data<T>();
    T* y = out[0].data<T>();
    with_act(k, [&](auto tag) {
      constexpr Act K = decltype(tag)::value;
      parallel_for(out[0].numel(), 1 << 14,
                   [x, y](int64_t b, int64_t e) { cpu_vec([&] { act_fwd_loop<K>(x, y, b, e); }); });
    });
  });
}

// <act>_grad(dy, z) -> dx, z the activation's input or output (the row's grad_reads): the derivative reads only it.
template <Act kFirst>
void act_grad_cpu(const KernelCtx&, const Attrs& a, std::span<const Tensor> in, std::span<const Tensor> out) {
  const Act k = activation_of(kFirst, a);
  dispatch_float(out[0].dtype(), [&]<typename T>() {
    const T* dy = in[0].data<T>();
    const T* z = in[1].data<T>();
    T* dx = out[0].data<T>();
    with_act(k, [&](auto tag) {
      constexpr Act K = decltype(tag)::value;
      parallel_for(out[0].numel(), 1 << 14,
                   [dy, z, dx](int64_t b, int64_t e) { cpu_vec([&] { act_bwd_loop<K>(dy, z, dx, b, e); }); });
    });
  });
}

}  // namespace

namespace cpu {
void activation(Act k, const float* x, float* y, int64_t n) {
  with_act(k, [&](auto tag) { cpu_vec([&] { act_fwd_loop<decltype(tag)::value>(x, y, 0, n); }); });
}
void activation_grad(Act k, const float* dy, const float* z, float* dx, int64_t n) {
  with_act(k, [&](auto tag) { cpu_vec([&] { act_bwd_loop<decltype(tag)::value>(dy, z, dx, 0, n); }); });
}
}  // namespace cpu

namespace {

std::vector<TensorDesc> infer_same(const Attrs&, std::span<const TensorDesc> in) {
  if (!is_float(in[0].dtype)) throw OpError("input must be floating point, got " + in[0].str());
  return {in[0]};
}
std::vector<TensorDesc> infer_first(const Attrs&, std::span<const TensorDesc> in) { return {in[0]}; }
std::vector<TensorDesc> infer_second(const Attrs&, std::span<const TensorDesc> in) { return {in[1]}; }

std::vector<SplitSignature> same_splits(const Attrs&, std::span<const TensorDesc> in,
                                        std::span<const TensorDesc> out) {
  return same_shape_splits(in, out);
}

// <act>_grad(dy, z) reads only what the derivative needs (the row's grad_reads): gelu its input; relu, tanh and
// sigmoid their output, so that backward keeps one of the two alive, not both (a recomputed gelu's output dies at
// the weight gradient that reads it instead of living on to gelu_grad). relu's output is <= 0 exactly where its
// input is, so relu_grad's mask is the same read from either, as PyTorch's threshold_backward on the result;
// reading the output lets relu run in place, its input dying at it (a linear's or a batch norm's output is then not
// kept beside the activation: the arena of relu networks shrinks by about a quarter).
template <Act kFirst>
void act_grad_rule(GradCtx& c) {
  const ActivationRow& row = kActivations[static_cast<int>(kFirst)];
  if (c.dout[0].valid() && c.needs[0])
    c.din[0] = c.g.emit(std::string(row.op) + "_grad", c.attrs,
                        {c.dout[0], row.grad_reads == ActReads::Output ? c.outputs[0] : c.inputs[0]})[0];
}

// Each variant on a 3-d and a 2-d input (the harness completes the attributes; a variant's sample sets its own).
template <Act kFirst>
std::vector<Sample> act_samples() {
  std::vector<Sample> out;
  const int f = static_cast<int>(kFirst);
  for (int k = f; k < kNumActivations && std::strcmp(kActivations[k].op, kActivations[f].op) == 0; ++k) {
    Attrs a;
    std::string tag;
    if (kActivations[k].attr) a.set(kActivations[k].attr, std::string(kActivations[k].value)), tag = std::string(kActivations[k].value) + "_";
    out.push_back({tag + "3d", a, {{TensorDesc{Shape{2, 3, 5}}, 0, -3, 3}}});
    out.push_back({tag + "2d", a, {{TensorDesc{Shape{4, 7}}, 0, -3, 3}}});
  }
  return out;
}
std::vector<BadSample> act_bad() { return {{"int", {}, {TensorDesc{Shape{2, 3}, DType::i32}}, "floating point"}}; }

// ---- ones_like: the seed of the loss gradient ----------------------------------------------------------
void ones_like_cpu(const KernelCtx&, const Attrs&, std::span<const Tensor>, std::span<const Tensor> out) {
  dispatch_float(out[0].dtype(), [&]<typename T>() {
    T* y = out[0].data<T>();
    for (int64_t i = 0; i < out[0].numel(); ++i) y[i] = T(1);
  });
}

// ---- cast: between floating dtypes (graphs with 16-bit values, graph/build.h) -----------------------------
std::vector<TensorDesc> cast_infer(const Attrs& a, std::span<const TensorDesc> in) {
  if (!is_float(in[0].dtype)) throw OpError("cast takes a floating-point input, got " + in[0].str());
  auto t = parse_dtype(a.s("dtype"));
  if (!t || !is_float(*t)) throw OpError("cast to '" + a.s("dtype") + "': not a floating dtype");
  return {TensorDesc{in[0].shape, *t}};
}
void cast_cpu(const KernelCtx&, const Attrs&, std::span<const Tensor> in, std::span<const Tensor> out) {
  convert_float(in[0], out[0]);
}
void cast_grad(GradCtx& c) {
  if (c.dout[0].valid() && c.needs[0])
    c.din[0] = c.g.emit("cast", {{"dtype", std::string(dtype_name(c.g.desc(c.inputs[0]).dtype))}}, {c.dout[0]})[0];
}

// Everything of an activation op and its gradient op but the kernels, from its first row in the list.
struct ActivationOps {
  CpuKernel fwd, bwd;
  GradFn rule;
  std::vector<Sample> (*samples)();
};
#define BRAID_ACT_OPS(K, ...) ActivationOps{act_cpu<Act::K>, act_grad_cpu<Act::K>, act_grad_rule<Act::K>, act_samples<Act::K>},
const ActivationOps kActivationOps[] = {BRAID_ACTIVATIONS(BRAID_ACT_OPS)};
#undef BRAID_ACT_OPS

void register_activations(Registry& r) {
  for (int f = 0; f < kNumActivations;) {
    const ActivationRow& row = kActivations[f];
    int end = f + 1;
    while (end < kNumActivations && std::strcmp(kActivations[end].op, row.op) == 0) ++end;
    std::vector<AttrSpec> attrs;
    std::string doc = row.doc;
    if (row.attr) {  // the variants: a string attribute, the first row its default
      AttrSpec spec{row.attr, AttrKind::String, AttrValue(std::string(row.value)), false, {}, 0, false, false, ""};
      for (int k = f; k < end; ++k) {
        spec.choices.push_back(kActivations[k].value);
        spec.doc += std::string(k > f ? "; " : "") + kActivations[k].value + ": " + kActivations[k].doc;
      }
      attrs.push_back(spec);
    }
    OpDef d;
    d.name = row.op;
    d.doc = doc;
    d.attrs = attrs;
    d.cheap_recompute = true;  // activations: elementwise, memory-bound
    d.autocast = Autocast::Follow;
    d.infer = infer_same;
    d.grad = kActivationOps[f].rule;
    d.splits = same_splits;
    d.cpu = kActivationOps[f].fwd;
    d.samples = kActivationOps[f].samples;
    d.bad_samples = act_bad;
    d.cost = [](const Attrs&, std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
      return default_cost(in, out, 4);
    };
    d.in_place = row.fwd_in_place;  // y over x where x dies here (its gradient reads y)
    d.activation = f;
    r.add(d);
    OpDef g = internal_op(std::string(row.op) + "_grad", std::string("gradient of ") + row.op, 2);
    g.attrs = attrs;
    g.infer = infer_second;
    g.splits = same_splits;
    g.cpu = kActivationOps[f].bwd;
    g.in_place = true;  // dx over dy
    g.activation = f;
    g.activation_grad = true;
    r.add(g);
    f = end;
  }
}

}  // namespace

void register_elementwise(Registry& r) {
  {
    OpDef d;
    d.name = "add";
    d.doc = "sum of two or more inputs with NumPy broadcasting";
    d.min_inputs = 2;
    d.max_inputs = -1;
    d.infer = infer_broadcast;
    d.grad = add_grad;
    d.splits = broadcast_splits;
    d.cost = nary_cost;
    d.cpu = add_cpu;
    d.autocast = Autocast::Follow;
    d.samples = add_samples;
    d.bad_samples = add_bad;
    r.add(d);
    d.name = "mul";
    d.doc = "product of two or more inputs with NumPy broadcasting";
    d.grad = mul_grad;
    d.cpu = mul_cpu;
    d.torch_rtol = 1e-5;
    r.add(d);
  }
  {
    OpDef d;
    d.name = "reduce_like";
    d.doc = "sums input 0 over the axes where input 1's shape broadcasts (gradient of a broadcast)";
    d.internal = true;
    d.differentiable = false;
    d.min_inputs = d.max_inputs = 2;
    d.infer = infer_reduce_like;
    d.splits = reduce_like_splits;
    d.cpu = reduce_like_cpu;
    r.add(d);
  }
  {
    OpDef d;
    d.name = "ones_like";
    d.doc = "a tensor of ones shaped as its input (the seed of the loss gradient)";
    d.internal = true;
    d.differentiable = false;
    d.infer = infer_first;
    d.splits = same_splits;
    d.cpu = ones_like_cpu;
    r.add(d);
  }
  {
    OpDef d = internal_op("cast", "converts between floating dtypes (round to nearest even when narrowing)", 1);
    d.any_float = true;
    d.attrs = {{"dtype", AttrKind::String, std::nullopt, false, {"f32", "f64", "bf16", "f16"}, 0, false, false,
                "the output's dtype"}};
    d.differentiable = true;
    d.infer = cast_infer;
    d.grad = cast_grad;
    d.splits = same_splits;  // not partial sums: rounding each part differs from rounding their sum
    d.cpu = cast_cpu;
    r.add(d);
  }
  register_activations(r);
}

}  // namespace braid::ops
