// The activation list: every elementwise activation braid has, written once for the CPU kernels
// (ops/defs/elementwise.cpp) and the CUDA ones (backends/cuda/kernels/elementwise.cu). From it follow the ops and
// their gradient ops in the registry, both backends' kernels, the CPU fusions with linear and conv2d, and the CUDA
// kernel table's rows: adding an activation is a row here, its ActMath below, the PyTorch reference
// (tests/torch_ref/ops/elementwise.py) and its line in docs/model_format.md (docs/architecture.md, "Adding an op").
//
// A row: X(Kind, op, attr, value, grad_reads, fwd_in_place, doc)
//   Kind          the enumerator of Act
//   op            the op's name in model files; rows of one op are consecutive, the variants that its string
//                 attribute `attr` chooses (gelu's approximate: none / tanh), the first row the default
//   grad_reads    what <op>_grad reads besides dy: the activation's Input or its Output (whichever its derivative
//                 reads best; backward then keeps one of the two alive, not both)
//   fwd_in_place  the forward may write its output over its input (its gradient reads only the output)
// ActMath<Kind>::fwd(x) and ::deriv(z) (z: what grad_reads names) are written over a math policy M with
// M::exp, M::tanh and M::erf: the CPU's branch-free float versions (ops/cpu/fast_math.h; std:: in double), CUDA's
// expf, tanhf and erff. Math follows PyTorch.
// C++17 and CUDA-compatible: the .cu files include it.
#pragma once
#include <cstring>
#include <type_traits>

#if defined(__CUDACC__)
#define BRAID_HD __host__ __device__ __forceinline__
#else
#define BRAID_HD __attribute__((always_inline)) inline
#endif

namespace braid::ops {

// clang-format off
#define BRAID_ACTIVATIONS(X)                                                                                      \
  X(Relu,     "relu",    nullptr,       nullptr, Output, true,  "max(x, 0)")                                       \
  X(Gelu,     "gelu",    "approximate", "none",  Input,  false, "Gaussian error linear unit, x Phi(x)")           \
  X(GeluTanh, "gelu",    "approximate", "tanh",  Input,  false, "its tanh approximation")                           \
  X(Tanh,     "tanh",    nullptr,       nullptr, Output, false, "hyperbolic tangent")                              \
  X(Sigmoid,  "sigmoid", nullptr,       nullptr, Output, false, "logistic sigmoid")                                \
  X(Silu,     "silu",    nullptr,       nullptr, Input,  false, "x sigmoid(x) (SiLU, swish: SwiGLU's gate)")
// clang-format on

#define BRAID_ACT_ENUM(K, ...) K,
enum class Act : int { BRAID_ACTIVATIONS(BRAID_ACT_ENUM) };
#undef BRAID_ACT_ENUM

enum class ActReads : int { Input, Output };

struct ActivationRow {
  Act kind;
  const char* op;
  const char* attr;   // nullptr: the op has one form
  const char* value;  // attr's value that selects this row
  ActReads grad_reads;
  bool fwd_in_place;
  const char* doc;
};

#define BRAID_ACT_ROW(K, OP, ATTR, VALUE, READS, IN_PLACE, DOC) \
  ActivationRow{Act::K, OP, ATTR, VALUE, ActReads::READS, IN_PLACE, DOC},
inline constexpr ActivationRow kActivations[] = {BRAID_ACTIVATIONS(BRAID_ACT_ROW)};
#undef BRAID_ACT_ROW
inline constexpr int kNumActivations = static_cast<int>(sizeof(kActivations) / sizeof(kActivations[0]));

inline const ActivationRow& activation_row(Act k) { return kActivations[static_cast<int>(k)]; }

// Calls fn(std::integral_constant<Act, K>{}) with the activation as a compile-time constant, so that the formulas
// inline into the loops (and vectorise on the CPU). Host code (CUDA's launchers pick a kernel with it).
template <typename F>
inline void with_act(Act k, F&& fn) {
  switch (k) {
#define BRAID_ACT_CASE(K, ...) \
  case Act::K: fn(std::integral_constant<Act, Act::K>{}); return;
    BRAID_ACTIVATIONS(BRAID_ACT_CASE)
#undef BRAID_ACT_CASE
  }
}

// ---- the formulas ---------------------------------------------------------------------------------------------
template <Act K>
struct ActMath;

namespace act_const {
constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kInvSqrt2 = 0.7071067811865476;
constexpr double kInvSqrt2Pi = 0.3989422804014327;
}  // namespace act_const

template <>
struct ActMath<Act::Relu> {
  // PyTorch: NaN stays NaN, -0 stays -0. deriv reads the output: <= 0 exactly where the input is (0 for x < 0, -0
  // for -0, NaN for NaN), as threshold_backward on the result (NaN passes dy).
  template <class M, class T> static BRAID_HD T fwd(T x) { return x < T(0) ? T(0) : x; }
  template <class M, class T> static BRAID_HD T deriv(T y) { return y <= T(0) ? T(0) : T(1); }
};

template <>
struct ActMath<Act::Gelu> {
  template <class M, class T> static BRAID_HD T fwd(T x) {
    return x * T(0.5) * (T(1) + M::erf(x * T(act_const::kInvSqrt2)));
  }
  template <class M, class T> static BRAID_HD T deriv(T x) {
    T cdf = T(0.5) * (T(1) + M::erf(x * T(act_const::kInvSqrt2)));
    T pdf = T(act_const::kInvSqrt2Pi) * M::exp(T(-0.5) * x * x);
    return cdf + x * pdf;
  }
};

template <>
struct ActMath<Act::GeluTanh> {
  template <class M, class T> static BRAID_HD T fwd(T x) {
    T inner = T(act_const::kSqrt2OverPi) * (x + T(0.044715) * x * x * x);
    return T(0.5) * x * (T(1) + M::tanh(inner));
  }
  template <class M, class T> static BRAID_HD T deriv(T x) {
    T x3 = x * x * x;
    T inner = T(act_const::kSqrt2OverPi) * (x + T(0.044715) * x3);
    T t = M::tanh(inner);
    T left = T(0.5) * x, right = T(1) + t;
    T left_d = T(0.5) * right;
    T right_d = left * (T(1) - t * t) * T(act_const::kSqrt2OverPi) * (T(1) + T(3) * T(0.044715) * x * x);
    return left_d + right_d;
  }
};

template <>
struct ActMath<Act::Tanh> {
  template <class M, class T> static BRAID_HD T fwd(T x) { return M::tanh(x); }
  template <class M, class T> static BRAID_HD T deriv(T y) { return T(1) - y * y; }
};

template <>
struct ActMath<Act::Sigmoid> {
  template <class M, class T> static BRAID_HD T fwd(T x) { return T(1) / (T(1) + M::exp(-x)); }
  template <class M, class T> static BRAID_HD T deriv(T y) { return y * (T(1) - y); }
};

template <>
struct ActMath<Act::Silu> {  // PyTorch's silu: x / (1 + e^-x); backward dy s (1 + x (1 - s)), s = sigmoid(x)
  template <class M, class T> static BRAID_HD T fwd(T x) { return x / (T(1) + M::exp(-x)); }
  template <class M, class T> static BRAID_HD T deriv(T x) {
    T s = T(1) / (T(1) + M::exp(-x));
    return s * (T(1) + x * (T(1) - s));
  }
};

// The row of op `first`'s variant that `value` (its attribute's value) selects: the rows of one op are consecutive.
// Host only. `first` itself where the op has one form or no row matches.
inline Act activation_variant(Act first, const char* value) {
  const int f = static_cast<int>(first);
  if (kActivations[f].attr == nullptr || value == nullptr) return first;
  for (int k = f; k < kNumActivations && std::strcmp(kActivations[k].op, kActivations[f].op) == 0; ++k)
    if (std::strcmp(kActivations[k].value, value) == 0) return kActivations[k].kind;
  return first;
}

}  // namespace braid::ops
