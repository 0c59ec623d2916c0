// Elementwise ops: add and mul (n-ary, NumPy broadcasting), the activations relu, gelu (exact and tanh),
// tanh and sigmoid, and the internal helpers their gradients emit: reduce_like (sum a gradient down to a
// broadcast input's shape), <act>_grad and ones_like (the seed of the loss gradient).
// Math follows PyTorch: gelu(x) = x * Phi(x) ("none") or 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
// In float, tanh and exp are cpu/fast_math.h's branch-free versions (1 ulp, vectorisable); double uses std::.
#include <cmath>

#include "core/cpu_isa.h"
#include "ops/cpu/fast_math.h"
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

// ---- unary activations ----------------------------------------------------------------------------------
constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kInvSqrt2 = 0.7071067811865476;
constexpr double kInvSqrt2Pi = 0.3989422804014327;

enum class Act { Relu, Gelu, GeluTanh, Tanh, Sigmoid };

Act act_of(const std::string& op, const Attrs& a) {
  if (op == "relu") return Act::Relu;
  if (op == "tanh") return Act::Tanh;
  if (op == "sigmoid") return Act::Sigmoid;
  return a.s("approximate") == "tanh" ? Act::GeluTanh : Act::Gelu;
}

template <Act K, typename T>
[[gnu::always_inline]] inline T act_fwd(T x) {
  if constexpr (K == Act::Relu) return x < T(0) ? T(0) : x;  // PyTorch: NaN stays NaN, -0 stays -0
  if constexpr (K == Act::Gelu) return x * T(0.5) * (T(1) + std::erf(x * T(kInvSqrt2)));
  if constexpr (K == Act::GeluTanh) {
    T inner = T(kSqrt2OverPi) * (x + T(0.044715) * x * x * x);
    return T(0.5) * x * (T(1) + cpu::tanh_of(inner));
  }
  if constexpr (K == Act::Tanh) return cpu::tanh_of(x);
  if constexpr (K == Act::Sigmoid) return T(1) / (T(1) + cpu::exp_of(-x));
}

// d act / dx at x (y = act(x) given for tanh/sigmoid, whose derivative reads best from y).
template <Act K, typename T>
[[gnu::always_inline]] inline T act_deriv(T x, T y) {
  // relu: x is relu's output (relu_grad reads it; the same test as on the input); threshold_backward: NaN passes dy
  if constexpr (K == Act::Relu) return x <= T(0) ? T(0) : T(1);
  if constexpr (K == Act::Gelu) {
    T cdf = T(0.5) * (T(1) + std::erf(x * T(kInvSqrt2)));
    T pdf = T(kInvSqrt2Pi) * std::exp(T(-0.5) * x * x);
    return cdf + x * pdf;
  }
  if constexpr (K == Act::GeluTanh) {
    T x3 = x * x * x;
    T inner = T(kSqrt2OverPi) * (x + T(0.044715) * x3);
    T t = cpu::tanh_of(inner);
    T left = T(0.5) * x, right = T(1) + t;
    T left_d = T(0.5) * right;
    T right_d = left * (T(1) - t * t) * T(kSqrt2OverPi) * (T(1) + T(3) * T(0.044715) * x * x);
    return left_d + right_d;
  }
  if constexpr (K == Act::Tanh) return T(1) - y * y;
  if constexpr (K == Act::Sigmoid) return y * (T(1) - y);
}

// Calls fn.template operator()<K>() with the activation as a compile-time constant, so that act_fwd /
// act_deriv inline into the loops and relu's vectorise (the same arithmetic, element by element).
template <typename F>
void with_act(Act k, F&& fn) {
  switch (k) {
    case Act::Relu: fn.template operator()<Act::Relu>(); return;
    case Act::Gelu: fn.template operator()<Act::Gelu>(); return;
    case Act::GeluTanh: fn.template operator()<Act::GeluTanh>(); return;
    case Act::Tanh: fn.template operator()<Act::Tanh>(); return;
    case Act::Sigmoid: fn.template operator()<Act::Sigmoid>(); return;
  }
}

// The loops, compiled per vector width (cpu_vec, core/cpu_isa.h): gelu's tanh is arithmetic-bound, so AVX-512
// lanes cut its time roughly by the width ratio against the SSE2 baseline.
// y may be x (relu runs in place, OpDef::in_place): no __restrict; element i is read before it is written.
template <Act K, typename T>
void act_fwd_loop(const T* x, T* y, int64_t b, int64_t e) {
#pragma omp simd
  for (int64_t i = b; i < e; ++i) y[i] = act_fwd<K>(x[i]);
}
template <Act K, typename T>
// dx may be dy (OpDef::in_place): no __restrict on them; element i is read before it is written.
void act_bwd_loop(const T* dy, const T* x, const T* y, T* dx, int64_t b, int64_t e) {
#pragma omp simd
  for (int64_t i = b; i < e; ++i) dx[i] = dy[i] * act_deriv<K>(x[i], y[i]);
}

void act_forward(const std::string& op, const Attrs& a, std::span<const Tensor> in, std::span<const Tensor> out) {
  dispatch_float(out[0].dtype(), [&]<typename T>() {
    const T* x = in[0].data<T>();
    T* y = out[0].data<T>();
    with_act(act_of(op, a), [&]<Act K>() {
      parallel_for(out[0].numel(), 1 << 14,
                   [x, y](int64_t b, int64_t e) { cpu_vec([&] { act_fwd_loop<K>(x, y, b, e); }); });
    });
  });
}

// <act>_grad(dy, z) -> dx, z the input x (gelu) or the output y (relu, tanh, sigmoid): act_deriv reads only that.
void act_backward(const std::string& op, const Attrs& a, std::span<const Tensor> in, std::span<const Tensor> out) {
  dispatch_float(out[0].dtype(), [&]<typename T>() {
    const T* dy = in[0].data<T>();
    const T* x = in[1].data<T>();
    const T* y = in[1].data<T>();
    T* dx = out[0].data<T>();
    with_act(act_of(op, a), [&]<Act K>() {
      parallel_for(out[0].numel(), 1 << 14,
                   [dy, x, y, dx](int64_t b, int64_t e) { cpu_vec([&] { act_bwd_loop<K>(dy, x, y, dx, b, e); }); });
    });
  });
}

}  // namespace

namespace cpu {
bool is_activation(const std::string& op) { return op == "relu" || op == "gelu" || op == "tanh" || op == "sigmoid"; }

void activation(const std::string& op, const Attrs& a, const float* x, float* y, int64_t n) {
  with_act(act_of(op, a), [&]<Act K>() { cpu_vec([&] { act_fwd_loop<K>(x, y, 0, n); }); });
}

bool is_activation_grad(const std::string& op) {
  return op.size() > 5 && op.compare(op.size() - 5, 5, "_grad") == 0 && is_activation(op.substr(0, op.size() - 5));
}

void activation_grad(const std::string& op, const Attrs& a, const float* dy, const float* z, float* dx, int64_t n) {
  with_act(act_of(op.substr(0, op.size() - 5), a),
           [&]<Act K>() { cpu_vec([&] { act_bwd_loop<K>(dy, z, z, dx, 0, n); }); });
}
}  // namespace cpu

namespace {

#define BRAID_ACT_KERNELS(NAME)                                                                        \
  void NAME##_cpu(const KernelCtx&, const Attrs& a, std::span<const Tensor> in, std::span<const Tensor> out) { \
    act_forward(#NAME, a, in, out);                                                                    \
  }                                                                                                    \
  void NAME##_grad_cpu(const KernelCtx&, const Attrs& a, std::span<const Tensor> in,                   \
                       std::span<const Tensor> out) {                                                  \
    act_backward(#NAME, a, in, out);                                                                   \
  }
BRAID_ACT_KERNELS(relu)
BRAID_ACT_KERNELS(gelu)
BRAID_ACT_KERNELS(tanh)
BRAID_ACT_KERNELS(sigmoid)
#undef BRAID_ACT_KERNELS

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

// <act>_grad(dy, z) reads only what the derivative needs (act_deriv): gelu its input; relu, tanh and sigmoid
// their output, so that backward keeps one of the two alive, not both (a recomputed gelu's output dies at the
// weight gradient that reads it instead of living on to gelu_grad). relu's output is <= 0 exactly where its input
// is (0 for x < 0, -0 for -0, NaN for NaN), so relu_grad's mask is the same read from either, as PyTorch's
// threshold_backward on the result; reading the output lets relu run in place, its input dying at it (a linear's
// or a batch norm's output is then not kept beside the activation: the arena of relu networks shrinks by about a
// quarter).
template <const char* kGradOp, bool kFromOutput>
void act_grad_rule(GradCtx& c) {
  if (c.dout[0].valid() && c.needs[0])
    c.din[0] = c.g.emit(kGradOp, c.attrs, {c.dout[0], kFromOutput ? c.outputs[0] : c.inputs[0]})[0];
}
constexpr char kReluGrad[] = "relu_grad", kGeluGrad[] = "gelu_grad", kTanhGrad[] = "tanh_grad",
               kSigmoidGrad[] = "sigmoid_grad";

std::vector<Sample> act_samples() {
  return {{"3d", {}, {{TensorDesc{Shape{2, 3, 5}}, 0, -3, 3}}}, {"2d", {}, {{TensorDesc{Shape{4, 7}}, 0, -3, 3}}}};
}
std::vector<Sample> gelu_samples() {
  return {{"exact", {{"approximate", std::string("none")}}, {{TensorDesc{Shape{2, 3, 5}}, 0, -3, 3}}},
          {"tanh", {{"approximate", std::string("tanh")}}, {{TensorDesc{Shape{4, 7}}, 0, -3, 3}}}};
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

OpDef unary_def(const std::string& name, CpuKernel k, GradFn g, std::string doc) {
  OpDef d;
  d.cheap_recompute = true;  // activations: elementwise, memory-bound
  d.autocast = Autocast::Follow;
  d.name = name;
  d.doc = std::move(doc);
  d.infer = infer_same;
  d.grad = g;
  d.splits = same_splits;
  d.cpu = k;
  d.samples = act_samples;
  d.bad_samples = act_bad;
  d.cost = [](const Attrs&, std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
    return default_cost(in, out, 4);
  };
  return d;
}

OpDef grad_def(const std::string& name, CpuKernel k, std::vector<AttrSpec> attrs = {}) {
  OpDef d = internal_op(name, "gradient of " + name.substr(0, name.size() - 5), 2);
  d.attrs = std::move(attrs);
  d.infer = infer_second;
  d.splits = same_splits;
  d.cpu = k;
  d.in_place = true;  // dx over dy
  return d;
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
  std::vector<AttrSpec> gelu_attrs{{"approximate", AttrKind::String, AttrValue(std::string("none")), false,
                                    {"none", "tanh"}, 0, false, false, "none: exact erf form; tanh: approximation"}};
  {
    OpDef relu = unary_def("relu", relu_cpu, act_grad_rule<kReluGrad, true>, "max(x, 0)");
    relu.in_place = true;  // y over x where x dies here (its gradient reads y)
    r.add(relu);
  }
  OpDef gelu = unary_def("gelu", gelu_cpu, act_grad_rule<kGeluGrad, false>, "Gaussian error linear unit");
  gelu.attrs = gelu_attrs;
  gelu.samples = gelu_samples;
  r.add(gelu);
  r.add(unary_def("tanh", tanh_cpu, act_grad_rule<kTanhGrad, true>, "hyperbolic tangent"));
  r.add(unary_def("sigmoid", sigmoid_cpu, act_grad_rule<kSigmoidGrad, true>, "logistic sigmoid"));
  r.add(grad_def("relu_grad", relu_grad_cpu));
  r.add(grad_def("gelu_grad", gelu_grad_cpu, gelu_attrs));
  r.add(grad_def("tanh_grad", tanh_grad_cpu));
  r.add(grad_def("sigmoid_grad", sigmoid_grad_cpu));
}

}  // namespace braid::ops
