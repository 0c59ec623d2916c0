// braid's float GEMM on panels (src/ops/cpu/kernel_util.cpp), for the benchmark programs that run the MLP's GEMMs
// without braid (mlp_floor.cpp, gemm_cold.cpp): C = op(A) op(B), row-major, one block of C's rows (or columns) per
// OpenMP thread, each a single-threaded dnnl_sgemm, blocks starting at multiples of 16; products under 2 MFLOP on
// one thread.
#pragma once
#include <dnnl.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace bench {

inline void sgemm_1(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                    int64_t ldb, float* c, int64_t ldc) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  if (dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc) != dnnl_success) {
    std::fprintf(stderr, "dnnl_sgemm failed\n");
    std::exit(1);
  }
  omp_set_num_threads(saved);
}

inline void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                 int64_t ldb, float* c, int64_t ldc) {
  const int threads = omp_get_max_threads();
  const bool by_rows = m >= n;
  const int64_t dim = by_rows ? m : n;
  constexpr int64_t kAlign = 16;
  if (2.0 * double(m) * double(n) * double(k) < 2e6 || dim < 2 * kAlign || threads <= 1) {
    sgemm_1(ta, tb, m, n, k, a, lda, b, ldb, c, ldc);
    return;
  }
  const int64_t parts = std::min<int64_t>(threads, dim / kAlign);
  const int64_t per = (dim + parts - 1) / parts;
  const int64_t step = (per + kAlign - 1) / kAlign * kAlign;
#pragma omp parallel for schedule(static) num_threads(static_cast<int>(std::min<int64_t>(threads, parts)))
  for (int64_t part = 0; part < parts; ++part) {
    const int64_t lo = std::min(dim, part * step), hi = std::min(dim, lo + step);
    if (hi <= lo) continue;
    if (by_rows) sgemm_1(ta, tb, hi - lo, n, k, ta ? a + lo : a + lo * lda, lda, b, ldb, c + lo * ldc, ldc);
    else sgemm_1(ta, tb, m, hi - lo, k, a, lda, tb ? b + lo * ldb : b + lo, ldb, c + lo, ldc);
  }
}

}  // namespace bench
