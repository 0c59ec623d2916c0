// BLAS GEMM (OpenBLAS, row-major CBLAS) and broadcasting index tables.
#include "ops/cpu/kernel_util.h"

#include <cblas.h>
#ifdef BRAID_HAVE_ONEDNN
#include <dnnl.h>
#endif

#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string_view>

namespace braid::ops::cpu {

namespace {

// Float GEMM, chosen once per process by BRAID_SGEMM (default: onednn where built, else openblas):
//   onednn           oneDNN's sgemm, single-threaded, on braid's panels (below)
//   openblas         OpenBLAS's sgemm, single-threaded, on braid's panels
//   openblas-threads OpenBLAS with its own threading (braid's behaviour before the panels; for A/B runs)
// Panels: braid splits C into one block of rows (or columns) per OpenMP thread and each thread runs one
// single-threaded GEMM on its block, so no thread waits on another inside a GEMM and the result of every
// element does not depend on the thread count (both libraries give the same bits for a block as for the
// whole matrix; checked by tests/ops/gemm_test.cpp). Measured in docs/benchmarks.md ("GEMM library").
enum class Sgemm { OneDnn, OpenBlas, OpenBlasThreads };
Sgemm sgemm_choice() {
  static const Sgemm choice = [] {
    const char* v = std::getenv("BRAID_SGEMM");
    const std::string_view s = v ? v : "";
    if (s == "openblas") return Sgemm::OpenBlas;
    if (s == "openblas-threads") return Sgemm::OpenBlasThreads;
#ifdef BRAID_HAVE_ONEDNN
    if (!s.empty() && s != "onednn")
      std::fprintf(stderr, "braid: warning: BRAID_SGEMM=%s is not one of onednn, openblas, openblas-threads; "
                   "using onednn\n", v);
    return Sgemm::OneDnn;
#else
    if (!s.empty())
      std::fprintf(stderr, "braid: warning: BRAID_SGEMM=%s: %s; using openblas\n", v,
                   s == "onednn" ? "this braid was built without oneDNN" : "not one of onednn, openblas, openblas-threads");
    return Sgemm::OpenBlas;
#endif
  }();
  return choice;
}

// One single-threaded GEMM (OpenBLAS's OpenMP build runs single-threaded inside a parallel region; oneDNN's
// sgemm is held to one thread by the calling task's thread count, restored after).
void sgemm_1(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
             const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
#ifdef BRAID_HAVE_ONEDNN
  if (sgemm_choice() == Sgemm::OneDnn) {
    const int saved = omp_get_max_threads();
    if (saved != 1) omp_set_num_threads(1);
    dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    if (saved != 1) omp_set_num_threads(saved);
    BRAID_ASSERT(st == dnnl_success, "dnnl_sgemm failed with status ", static_cast<int>(st), " (", m, "x", n, "x", k,
                 ")");
    return;
  }
#endif
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb),
              beta, c, static_cast<int>(ldc));
}

}  // namespace

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, GemmEpilogue{});
}

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc, const GemmEpilogue& ep) {
  if (m == 0 || n == 0) return;
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  // Below about 2 MFLOP a GEMM is over before a parallel region pays for itself: one thread does it all.
  constexpr double kSplitMinFlops = 2e6;
  const bool by_rows = m >= n;
  const int64_t dim = by_rows ? m : n;
  // Panels start at multiples of 16 (whole micro-panels of the AVX-512 kernels). That matters for the bits:
  // a block cut at an arbitrary column (1, 49, n - 7) may come out of a library's edge kernels with other
  // roundings than inside the whole product (measured for both libraries), so callers must not split C
  // themselves where results must not depend on the thread count.
  constexpr int64_t kAlign = 16;
  // OpenBLAS 0.3.21's Haswell kernels (also what it runs on AVX-512 Zen 4) give a block other bits than the same
  // rows inside the whole product (Gemm.OpenBlasPanels on an AMD EPYC, 2026-12-02), so on OpenBLAS the panels
  // are fixed by the shape alone (kFixedPanels of them, whatever the thread count, run in turn by one thread):
  // the bits are those of the panels on any thread count. oneDNN's sgemm gives a block the bits of the whole,
  // and keeps one panel per thread.
  constexpr int64_t kFixedPanels = 8;
  const bool fixed = sgemm_choice() == Sgemm::OpenBlas;
  const bool small = 2.0 * double(m) * double(n) * double(k) < kSplitMinFlops || dim < 2 * kAlign;
  if (sgemm_choice() == Sgemm::OpenBlasThreads || small || (threads <= 1 && !fixed)) {
    sgemm_1(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    if (ep.fn) parallel_for(m, std::max<int64_t>(1, 8192 / n), [&](int64_t r0, int64_t r1) { ep.fn(ep.ctx, r0, r1, 0, n); });
    return;
  }
  const int64_t parts = std::min<int64_t>(fixed ? kFixedPanels : threads, dim / kAlign);
  const int64_t per = (dim + parts - 1) / parts;
  const int64_t step = (per + kAlign - 1) / kAlign * kAlign;
#pragma omp parallel for schedule(static) num_threads(static_cast<int>(std::min<int64_t>(threads, parts)))
  for (int64_t part = 0; part < parts; ++part) {
    const int64_t lo = std::min(dim, part * step), hi = std::min(dim, lo + step);
    if (hi > lo) {
      if (by_rows) {  // rows lo..hi of C: rows of op(A)
        sgemm_1(ta, tb, hi - lo, n, k, alpha, ta ? a + lo : a + lo * lda, lda, b, ldb, beta, c + lo * ldc, ldc);
        if (ep.fn) ep.fn(ep.ctx, lo, hi, 0, n);
      } else {  // columns lo..hi of C: columns of op(B)
        sgemm_1(ta, tb, m, hi - lo, k, alpha, a, lda, tb ? b + lo * ldb : b + lo, ldb, beta, c + lo, ldc);
        if (ep.fn) ep.fn(ep.ctx, 0, m, lo, hi);
      }
    }
  }
}

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
          const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb),
              beta, c, static_cast<int>(ldc));
}

namespace {
template <typename T>
BRAID_CPU_CLONES void add_to_lanes_t(const T* __restrict v, int64_t n, double* __restrict acc) {
  const int64_t body = n / kSumLanes * kSumLanes;
  for (int64_t e = 0; e < body; e += kSumLanes)
    for (int l = 0; l < kSumLanes; ++l) acc[l] += v[e + l];
  for (int64_t e = body; e < n; ++e) acc[e - body] += v[e];
}
}  // namespace

void add_to_lanes(const float* v, int64_t n, double* acc) { add_to_lanes_t(v, n, acc); }
void add_to_lanes(const double* v, int64_t n, double* acc) { add_to_lanes_t(v, n, acc); }

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
