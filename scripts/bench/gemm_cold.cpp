// How much the MLP benchmark's GEMMs lose when their operands are not in the caches (issue 23): each GEMM of
// configs/bench/mlp.yaml's step, on braid's panels (src/ops/cpu/kernel_util.cpp: one block of C per OpenMP thread,
// starting at multiples of 16), timed alone after a sweep of S MiB of other memory through the caches (by the same
// threads, not timed), for each S. S = 0 is a loop of the same call (every operand cache-warm); a large S, operands
// from DRAM. The MLP's step touches about 28 MiB between two uses of a weight (parameters, gradients and momentum of
// 7.3 MiB each, the 4.8 MiB arena, the batch), so its GEMMs run between the two.
// Prints one JSON line: per GEMM, the median ms over `reps` calls at each sweep size.
// usage: gemm_cold [reps=200] [S MiB ...=0 4 8 16 24 32 64]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench_panels.h"

namespace {

using bench::gemm;
using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 200;
  std::vector<int> sizes;
  for (int i = 2; i < argc; ++i) sizes.push_back(std::atoi(argv[i]));
  if (sizes.empty()) sizes = {0, 4, 8, 16, 24, 32, 64};
  if (reps < 1 || std::any_of(sizes.begin(), sizes.end(), [](int s) { return s < 0 || s > 4096; })) {
    std::fprintf(stderr, "usage: gemm_cold [reps >= 1] [MiB 0-4096 ...]\n");
    return 2;
  }
  constexpr int64_t B = 256, I = 784, H = 1024;
  std::vector<float> x(B * I, 0.01f), w1(H * I, 0.02f), w2(H * H, 0.03f), h1(B * H, 0.04f), dh(B * H, 0.05f);
  std::vector<float> y(B * H), g1(H * I), g2(H * H);
  const int max_mib = *std::max_element(sizes.begin(), sizes.end());
  std::vector<char> junk(static_cast<size_t>(max_mib) << 20, 1);
  struct G {
    const char* name;
    bool ta, tb;
    int64_t m, n, k;
    const float *a, *b;
    int64_t lda, ldb;
    float* c;
    int64_t ldc;
  };
  const G gemms[] = {{"fc1 y NT 256x1024x784", false, true, B, H, I, x.data(), w1.data(), I, I, y.data(), H},
                     {"fc2 y NT 256x1024x1024", false, true, B, H, H, h1.data(), w2.data(), H, H, y.data(), H},
                     {"fc2 dx NN 256x1024x1024", false, false, B, H, H, dh.data(), w2.data(), H, H, y.data(), H},
                     {"fc2 dW TN 1024x1024x256", true, false, H, H, B, dh.data(), h1.data(), H, H, g2.data(), H},
                     {"fc1 dW TN 1024x784x256", true, false, H, I, B, dh.data(), x.data(), H, I, g1.data(), I}};
  std::printf("{\"threads\": %d, \"reps\": %d, \"ms\": {", omp_get_max_threads(), reps);
  bool first = true;
  for (const G& g : gemms) {
    std::printf("%s\"%s\": {", first ? "" : ", ", g.name);
    first = false;
    for (size_t s = 0; s < sizes.size(); ++s) {
      const int64_t bytes = static_cast<int64_t>(sizes[s]) << 20;
      std::vector<double> t;
      for (int r = 0; r < reps + 5; ++r) {
        if (bytes > 0) {
#pragma omp parallel for schedule(static)
          for (int64_t i = 0; i < bytes; i += 64) junk[static_cast<size_t>(i)] += 1;
        }
        const auto t0 = Clock::now();
        gemm(g.ta, g.tb, g.m, g.n, g.k, g.a, g.lda, g.b, g.ldb, g.c, g.ldc);
        if (r >= 5) t.push_back(std::chrono::duration<double>(Clock::now() - t0).count() * 1e3);
      }
      std::printf("%s\"%d\": %.3f", s ? ", " : "", sizes[s], median(t));
    }
    std::printf("}");
  }
  std::printf("}}\n");
  return 0;
}
