// The machine's SGEMM ceiling for scripts/bench/vs_pytorch.sh: oneDNN's dnnl_sgemm (the GEMM braid and PyTorch's
// CPU build call) on square f32 matrices of n = 1024, 1536 and 2048, with the OpenMP threads of the environment
// (two on the benchmark machine). Prints one JSON line: the best GFLOP/s of each size (best of `reps` timed calls
// after one untimed) and the largest of them, the ceiling the benchmark's achieved training FLOP/s is compared to.
// usage: sgemm_ceiling [reps=5]
#include <dnnl.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 5;
  std::printf("{\"threads\": %d, \"sizes\": {", omp_get_max_threads());
  double best_all = 0;
  bool first = true;
  for (int n : {1024, 1536, 2048}) {
    std::vector<float> a(static_cast<size_t>(n) * n), b(a.size()), c(a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      a[i] = static_cast<float>((i * 7) % 13) / 13.0f - 0.5f;
      b[i] = static_cast<float>((i * 5) % 11) / 11.0f - 0.5f;
    }
    double best = 0;
    for (int r = 0; r <= reps; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      if (dnnl_sgemm('N', 'N', n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n) != dnnl_success) return 1;
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (r > 0) best = std::max(best, 2.0 * n * n * n / s / 1e9);
    }
    best_all = std::max(best_all, best);
    std::printf("%s\"%d\": %.1f", first ? "" : ", ", n, best);
    first = false;
  }
  std::printf("}, \"ceiling_gflops\": %.1f}\n", best_all);
  return 0;
}
