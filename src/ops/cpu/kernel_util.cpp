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

#include "core/cpu_isa.h"

namespace braid::ops::cpu {

namespace {

// Float GEMM, chosen once per process by BRAID_SGEMM (default: onednn where built and running its AVX-512
// kernels, else openblas):
//   onednn           oneDNN's sgemm, single-threaded, on braid's panels (below)
//   openblas         OpenBLAS's sgemm, single-threaded, on braid's panels
//   openblas-threads OpenBLAS with its own threading (braid's behaviour before the panels; for A/B runs; its bits
//                    depend on the thread count)
// Panels: braid cuts C into blocks of rows (or columns) fixed by the shape alone and runs one single-threaded
// library GEMM per block, the blocks shared out among the OpenMP threads: no thread waits on another inside a
// GEMM, and the result of every element does not depend on the thread count because the library calls do not.
// Neither library gives a block the bits of the same rows inside the whole product (see gemm()). Measured in
// docs/benchmarks.md ("GEMM library").
enum class Sgemm { OneDnn, OpenBlas, OpenBlasThreads };
Sgemm sgemm_choice() {
  static const Sgemm choice = [] {
    const char* v = std::getenv("BRAID_SGEMM");
    const std::string_view s = v ? v : "";
    if (s == "openblas") return Sgemm::OpenBlas;
    if (s == "openblas-threads") return Sgemm::OpenBlasThreads;
#ifdef BRAID_HAVE_ONEDNN
    if (s == "onednn") return Sgemm::OneDnn;
    // By default oneDNN where it runs its AVX-512 kernels, OpenBLAS below that. oneDNN 2.6's AVX2 sgemm falls off
    // a cliff on some shapes the models run (single-threaded, on a Zen 4 capped to AVX2: 1024x256x2048 TN, a GPT
    // weight gradient, 44 GFLOP/s against OpenBLAS Haswell's 103; row blocks of 256 of 1024x1024x256 TN, an MLP's,
    // 2.9x slower than the whole) where OpenBLAS's Haswell kernels run evenly at 100-110 on every shape and block
    // (docs/benchmarks.md, "GEMM library at AVX2").
    const bool avx512 = (dnnl_get_effective_cpu_isa() & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core;
    if (!s.empty())
      std::fprintf(stderr,
                   "braid: warning: BRAID_SGEMM=%s is not one of onednn, openblas, openblas-threads; "
                   "using %s\n",
                   v, avx512 ? "onednn" : "openblas");
    return avx512 ? Sgemm::OneDnn : Sgemm::OpenBlas;
#else
    if (!s.empty())
      std::fprintf(stderr, "braid: warning: BRAID_SGEMM=%s: %s; using openblas\n", v,
                   s == "onednn" ? "this braid was built without oneDNN" : "not one of onednn, openblas, openblas-threads");
    return Sgemm::OpenBlas;
#endif
  }();
  return choice;
}

void openblas_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                    const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta,
              c, static_cast<int>(ldc));
}

// One single-threaded GEMM: both libraries take their thread count from the OpenMP ICV of the calling task
// (OpenBLAS's OpenMP build also runs single-threaded inside a parallel region), so it is held to one thread
// here and restored after.
void sgemm_1(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
             const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const int saved = omp_get_max_threads();
  if (saved != 1) omp_set_num_threads(1);
#ifdef BRAID_HAVE_ONEDNN
  if (sgemm_choice() == Sgemm::OneDnn) {
    dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    if (saved != 1) omp_set_num_threads(saved);
    BRAID_ASSERT(st == dnnl_success, "dnnl_sgemm failed with status ", static_cast<int>(st), " (", m, "x", n, "x", k,
                 ")");
    return;
  }
#endif
  openblas_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  if (saved != 1) omp_set_num_threads(saved);
}

}  // namespace

GemmPanels gemm_panels(int64_t m, int64_t n, int64_t k) {
  // Below about 2 MFLOP a GEMM is over before a parallel region pays for itself: one call does it all.
  constexpr double kSplitMinFlops = 2e6;
  // Panels start at multiples of 16 (whole micro-panels of the AVX-512 kernels; two of AVX2's 8-wide ones): a
  // block cut at an arbitrary column (1, 49, n - 7) comes out of a library's edge kernels with other roundings, so
  // callers must not split C themselves where results must not depend on the thread count.
  constexpr int64_t kAlign = 16;
  // At most 4 panels: the thread counts of 1, 2 and 4 share them out evenly, and each library call stays large:
  // 8 blocks cost OpenBLAS's Haswell kernels 1-12% against the whole product, 4 blocks 0-8% (single-threaded,
  // the models' shapes; docs/benchmarks.md). A GEMM of f MFLOP gets at most f panels (a power of two),
  // so a small one is not cut into calls too short to pay for their packing.
  constexpr int64_t kMaxPanels = 4;
  GemmPanels p;
  p.by_rows = m >= n;
  const int64_t dim = p.by_rows ? m : n;
  const double flops = 2.0 * double(m) * double(n) * double(k);
  if (flops < kSplitMinFlops || dim < 2 * kAlign) return p;
  const int64_t most = std::min<int64_t>({kMaxPanels, dim / kAlign, static_cast<int64_t>(flops / 1e6)});
  int64_t parts = 1;
  while (parts * 2 <= most) parts *= 2;
  const int64_t per = (dim + parts - 1) / parts;
  p.step = (per + kAlign - 1) / kAlign * kAlign;
  p.parts = (dim + p.step - 1) / p.step;
  return p;
}

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, GemmEpilogue{});
}

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc, const GemmEpilogue& ep) {
  if (m == 0 || n == 0) return;
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  const bool library_threads = sgemm_choice() == Sgemm::OpenBlasThreads;  // bits depend on the thread count
  const GemmPanels plan = gemm_panels(m, n, k);
  if (library_threads || plan.parts == 1) {  // one call for the whole product
    if (library_threads) openblas_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    else sgemm_1(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    if (ep.fn)
      parallel_for(m, std::max<int64_t>(1, 8192 / n), [&](int64_t r0, int64_t r1) { ep.fn(ep.ctx, r0, r1, 0, n); });
    return;
  }
  const bool by_rows = plan.by_rows;
  const int64_t dim = by_rows ? m : n, parts = plan.parts, step = plan.step;
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
void add_to_lanes_t(const T* __restrict v, int64_t n, double* __restrict acc) {
  const int64_t body = n / kSumLanes * kSumLanes;
  for (int64_t e = 0; e < body; e += kSumLanes)
    for (int l = 0; l < kSumLanes; ++l) acc[l] += v[e + l];
  for (int64_t e = body; e < n; ++e) acc[e - body] += v[e];
}
}  // namespace

void add_to_lanes(const float* v, int64_t n, double* acc) {
  cpu_vec([&] { add_to_lanes_t(v, n, acc); });
}
void add_to_lanes(const double* v, int64_t n, double* acc) {
  cpu_vec([&] { add_to_lanes_t(v, n, acc); });
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
