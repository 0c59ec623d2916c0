// Rank-order folds; see reduce.h.
#include "exec/comm/reduce.h"

#include <type_traits>

namespace braid::exec {
namespace {


template <typename T>
T apply(ReduceOp op, T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;  // wrap around on overflow instead of undefined behaviour
    if (op == ReduceOp::Sum) return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
    if (op == ReduceOp::Prod) return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    if (op == ReduceOp::Sum || op == ReduceOp::Avg) return a + b;
    if (op == ReduceOp::Prod) return a * b;
  }
  if (a != a) return a;  // NaN propagates (the first in rank order), as torch.maximum / torch.minimum
  if (b != b) return b;
  if (op == ReduceOp::Max) return b > a ? b : a;
  return b < a ? b : a;
}

template <typename T, ReduceOp kOp>
void fold_typed(std::byte* dst, const std::byte* const* src, int n, int64_t count) {
  T* d = reinterpret_cast<T*>(dst);
  for (int64_t i = 0; i < count; ++i) {
    T acc = reinterpret_cast<const T*>(src[0])[i];
    for (int j = 1; j < n; ++j) acc = apply<T>(kOp, acc, reinterpret_cast<const T*>(src[j])[i]);
    if constexpr (kOp == ReduceOp::Avg) acc = acc / static_cast<T>(n);
    d[i] = acc;  // after every read of element i, so dst may be one of the sources
  }
}

template <typename T>
void fold_op(ReduceOp op, std::byte* dst, const std::byte* const* src, int n, int64_t count) {
  switch (op) {
    case ReduceOp::Sum: return fold_typed<T, ReduceOp::Sum>(dst, src, n, count);
    case ReduceOp::Prod: return fold_typed<T, ReduceOp::Prod>(dst, src, n, count);
    case ReduceOp::Min: return fold_typed<T, ReduceOp::Min>(dst, src, n, count);
    case ReduceOp::Max: return fold_typed<T, ReduceOp::Max>(dst, src, n, count);
    case ReduceOp::Avg:
      if constexpr (std::is_floating_point_v<T>) return fold_typed<T, ReduceOp::Avg>(dst, src, n, count);
      break;
  }
  BRAID_ASSERT(false, "reduce op ", reduce_op_name(op), " on an integer tensor passed the argument check");
}

}  // namespace

void fold(DType t, ReduceOp op, std::byte* dst, const std::byte* const* src, int n, int64_t count) {
  if (count <= 0) return;
  switch (t) {
    case DType::f32: return fold_op<float>(op, dst, src, n, count);
    case DType::f64: return fold_op<double>(op, dst, src, n, count);
    case DType::i32: return fold_op<int32_t>(op, dst, src, n, count);
    case DType::i64: return fold_op<int64_t>(op, dst, src, n, count);
    default: BRAID_ASSERT(false, "reduction of ", dtype_name(t), " passed the argument check");
  }
}

}  // namespace braid::exec
