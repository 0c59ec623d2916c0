// One single-threaded float GEMM whole, and cut into P blocks of rows or columns of C (16-aligned, as braid's
// panels: ops::cpu::gemm_panels), on oneDNN's dnnl_sgemm and OpenBLAS's cblas_sgemm: the time of the blocks against
// the whole, and each library's GFLOP/s on the whole. Shapes as arguments: M N K TT (TT: NN, NT, TN or TT).
// Built and run by gemm_blocks.sh at the native ISA and with both libraries capped to AVX2.
#include <cblas.h>
#include <dnnl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {
enum Lib { kOneDnn, kOpenBlas };
void sgemm(Lib lib, bool ta, bool tb, long m, long n, long k, const float* a, long lda, const float* b, long ldb,
           float* c, long ldc) {
  if (lib == kOneDnn)
    dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, 1.f, a, lda, b, ldb, 0.f, c, ldc);
  else
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(m), int(n), int(k),
                1.f, a, int(lda), b, int(ldb), 0.f, c, int(ldc));
}
// Best of `reps` times of the GEMM cut into `parts` blocks along braid's direction (rows when m >= n).
double best_time(Lib lib, long m, long n, long k, bool ta, bool tb, int parts, const float* a, const float* b,
                 float* c, int reps) {
  const long lda = ta ? m : k, ldb = tb ? k : n;
  const bool rows = m >= n;
  const long dim = rows ? m : n, per = (dim + parts - 1) / parts, step = (per + 15) / 16 * 16;
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int p = 0; p < parts; ++p) {
      const long lo = std::min(dim, p * step), hi = std::min(dim, lo + step);
      if (hi <= lo) continue;
      if (rows)
        sgemm(lib, ta, tb, hi - lo, n, k, ta ? a + lo : a + lo * lda, lda, b, ldb, c + lo * n, n);
      else
        sgemm(lib, ta, tb, m, hi - lo, k, a, lda, tb ? b + lo * ldb : b + lo, ldb, c + lo, n);
    }
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}
}  // namespace

int main(int argc, char** argv) {
  std::printf("%-20s %-8s %9s %8s %7s %7s %7s\n", "shape", "library", "whole ms", "GFLOP/s", "2 blk", "4 blk",
              "8 blk");
  for (int i = 1; i + 3 < argc; i += 4) {
    const long m = std::atol(argv[i]), n = std::atol(argv[i + 1]), k = std::atol(argv[i + 2]);
    const bool ta = argv[i + 3][0] == 'T', tb = argv[i + 3][1] == 'T';
    std::vector<float> a(size_t(m * k)), b(size_t(k * n)), c(size_t(m * n));
    for (size_t j = 0; j < a.size(); ++j) a[j] = float(j % 97) / 97.f - 0.5f;
    for (size_t j = 0; j < b.size(); ++j) b[j] = float(j % 89) / 89.f - 0.5f;
    for (Lib lib : {kOneDnn, kOpenBlas}) {
      const double whole = best_time(lib, m, n, k, ta, tb, 1, a.data(), b.data(), c.data(), 15);
      char shape[64];
      std::snprintf(shape, sizeof shape, "%ldx%ldx%ld %s", m, n, k, argv[i + 3]);
      std::printf("%-20s %-8s %9.2f %8.1f", shape, lib == kOneDnn ? "onednn" : "openblas", whole * 1e3,
                  2e-9 * double(m) * double(n) * double(k) / whole);
      for (int p : {2, 4, 8})
        std::printf(" %6.2fx", best_time(lib, m, n, k, ta, tb, p, a.data(), b.data(), c.data(), 15) / whole);
      std::printf("\n");
    }
  }
}
