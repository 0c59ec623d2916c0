// Helpers for CPU kernels: dtype dispatch (kernels are templates over float and double so that the
// gradient checks run in double), a BLAS GEMM wrapper, and broadcasting index arithmetic.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "core/tensor.h"
#include "ops/activation.h"

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

// How a float GEMM of this shape is cut: `parts` blocks of `step` rows of C (by_rows) or columns (the last one
// shorter), fixed by (m, n, k) alone so that the bits never depend on the thread count. parts == 1: one call.
struct GemmPanels {
  bool by_rows = true;
  int64_t parts = 1, step = 0;
};
GemmPanels gemm_panels(int64_t m, int64_t n, int64_t k);

// A GEMM epilogue: fn(ctx, r0, r1, c0, c1) runs on the block rows [r0, r1) x columns [c0, c1) of C right after
// the thread that computed the block finished it (the block still in that core's cache). Float only.
struct GemmEpilogue {
  void (*fn)(void* ctx, int64_t r0, int64_t r1, int64_t c0, int64_t c1) = nullptr;
  void* ctx = nullptr;
};
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc, const GemmEpilogue& epilogue);

// y (M, out) = x (M, in) W^T (+ b broadcast over rows), the bias first and the GEMM adding onto it: linear and
// attention's projections. `epilogue` (float only) runs on each GEMM block (a fused activation, ops/cpu/fused.h).
template <typename T>
void affine_rows(const T* x, int64_t m, int64_t fin, const T* w, const T* b, int64_t fout, T* y,
                 const cpu::GemmEpilogue* epilogue = nullptr) {
  if (b) {
    parallel_for(m, 1 << 10, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t j = 0; j < fout; ++j) y[r * fout + j] = b[j];
    });
  }
  if constexpr (std::is_same_v<T, float>) {
    if (epilogue) return gemm(false, true, m, fout, fin, 1.0f, x, fin, w, fin, b ? 1.0f : 0.0f, y, fout, *epilogue);
  }
  gemm(false, true, m, fout, fin, T(1), x, fin, w, fin, b ? T(1) : T(0), y, fout);
}

// The activation ops' forward loop, y[i] = act(x[i]) for i in [0, n) (k: the row of ops/activation.h's list that
// the node computes, activation_of): the same code the ops run, so a fused epilogue gives the same bits.
void activation(Act k, const float* x, float* y, int64_t n);
// <act>_grad ops: dx = dy * act'(z), z the activation's input or output (the row's grad_reads), as the op's kernel
// computes it; dx may be dy.
void activation_grad(Act k, const float* dy, const float* z, float* dx, int64_t n);

// Reductions whose result must not depend on the vector width or the thread count: element i goes to double
// lane i % kSumLanes, in order within each lane (independent chains that vectorise), and the lanes are added
// in a fixed tree by lane_total. add_to_lanes is that loop for a plain sum, compiled per vector width.
constexpr int kSumLanes = 8;
inline double lane_total(const double* acc) {
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}
void add_to_lanes(const float* v, int64_t n, double* acc);
void add_to_lanes(const double* v, int64_t n, double* acc);

// NumPy broadcasting of `in` to `out_shape`: for every output element, the flat index of the input element.
// Shapes are right-aligned; a missing or size-1 input axis broadcasts.
std::vector<int64_t> broadcast_index(const Shape& in, const Shape& out_shape);
// The broadcast result of two shapes, or nullopt when they do not broadcast.
std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b);

}  // namespace braid::ops::cpu
