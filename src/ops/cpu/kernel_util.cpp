// BLAS GEMM (OpenBLAS, row-major CBLAS) and broadcasting index tables.
#include "ops/cpu/kernel_util.h"

#include <cblas.h>

#include <optional>

namespace braid::ops::cpu {

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb),
              beta, c, static_cast<int>(ldc));
}

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
          const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb),
              beta, c, static_cast<int>(ldc));
}

std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b) {
  int r = std::max(a.rank(), b.rank());
  std::vector<int64_t> out(static_cast<size_t>(r));
  for (int i = 0; i < r; ++i) {
    int64_t da = i < r - a.rank() ? 1 : a[i - (r - a.rank())];
    int64_t db = i < r - b.rank() ? 1 : b[i - (r - b.rank())];
    if (da != db && da != 1 && db != 1) return std::nullopt;
    out[static_cast<size_t>(i)] = da == 1 ? db : da;
  }
  return Shape(out);
}

std::vector<int64_t> broadcast_index(const Shape& in, const Shape& out_shape) {
  int r = out_shape.rank(), off = r - in.rank();
  std::vector<int64_t> in_stride(static_cast<size_t>(r), 0);
  int64_t s = 1;
  for (int i = r - 1; i >= off; --i) {
    in_stride[static_cast<size_t>(i)] = in[i - off] == 1 ? 0 : s;
    s *= in[i - off];
  }
  int64_t n = out_shape.numel();
  std::vector<int64_t> idx(static_cast<size_t>(n));
  std::vector<int64_t> coord(static_cast<size_t>(r), 0);
  int64_t cur = 0;
  for (int64_t e = 0; e < n; ++e) {
    idx[static_cast<size_t>(e)] = cur;
    for (int i = r - 1; i >= 0; --i) {
      auto ui = static_cast<size_t>(i);
      ++coord[ui];
      cur += in_stride[ui];
      if (coord[ui] < out_shape[i]) break;
      cur -= in_stride[ui] * coord[ui];
      coord[ui] = 0;
    }
  }
  return idx;
}

}  // namespace braid::ops::cpu
