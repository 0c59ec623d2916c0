// Helpers for CPU kernels: dtype dispatch (kernels are templates over float and double so that the
// gradient checks run in double), a BLAS GEMM wrapper, and broadcasting index arithmetic.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "core/tensor.h"

namespace braid::ops {
class Attrs;
}

namespace braid::ops::cpu {

// Calls fn.template operator()<T>() with T = float or double according to dtype.
template <typename F>
void dispatch_float(DType t, F&& fn) {
  switch (t) {
    case DType::f32: fn.template operator()<float>(); return;
    case DType::f64: fn.template operator()<double>(); return;
    default: BRAID_ASSERT(false, "CPU kernel has no ", dtype_name(t), " version");
  }
}

// Integer id inputs (i32 or i64) read as int64.
inline int64_t int_at(const Tensor& t, int64_t i) {
  return t.dtype() == DType::i32 ? t.data<int32_t>()[i] : t.data<int64_t>()[i];
}

// C[M,N] = alpha * op(A) op(B) + beta * C, row-major; op = transpose when ta/tb.
// lda/ldb/ldc are row strides of the matrices as stored.
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
          const double* b, int64_t ldb, double beta, double* c, int64_t ldc);

// A GEMM epilogue: fn(ctx, r0, r1, c0, c1) runs on the block rows [r0, r1) x columns [c0, c1) of C right after
// the thread that computed the block finished it (the block still in that core's cache). Float only.
struct GemmEpilogue {
  void (*fn)(void* ctx, int64_t r0, int64_t r1, int64_t c0, int64_t c1) = nullptr;
  void* ctx = nullptr;
};
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc, const GemmEpilogue& epilogue);

// The activation ops' forward loop, y[i] = act(x[i]) for i in [0, n) (op: relu, gelu with its `approximate`
// attribute, tanh, sigmoid): the same code the ops run, so a fused epilogue gives the same bits.
bool is_activation(const std::string& op);
void activation(const std::string& op, const Attrs& a, const float* x, float* y, int64_t n);

// NumPy broadcasting of `in` to `out_shape`: for every output element, the flat index of the input element.
// Shapes are right-aligned; a missing or size-1 input axis broadcasts.
std::vector<int64_t> broadcast_index(const Shape& in, const Shape& out_shape);
// The broadcast result of two shapes, or nullopt when they do not broadcast.
std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b);

}  // namespace braid::ops::cpu
