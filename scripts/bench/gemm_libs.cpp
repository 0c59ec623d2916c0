// Chooses the CPU GEMM library by measurement: OpenBLAS (OpenMP build, what braid links) cblas_sgemm, oneDNN
// dnnl_sgemm and BLIS (OpenMP build) bli_sgemm on the GEMMs of the benchmark models (configs/bench), with the
// transposes braid's kernels pass (linear: y = x W^T, dx = dy W, dW = dy^T x; conv2d over a group of G
// samples: y = W col, dcol = W^T dy, dW = dy col^T). Libraries alternate within each repetition (so load
// spikes hit all of them); the figure is the median GFLOP/s of the repetitions, at 1 and 2 threads.
// Build and run: scripts/bench/gemm_libs.sh
#include <cblas.h>
#include <dnnl.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

void blis_sgemm_rm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                   int64_t ldb, float beta, float* c, int64_t ldc);
void blis_threads(int n);
const char* blis_arch();

struct Shape {
  const char* what;
  bool ta, tb;
  int m, n, k;
};

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 9;
  const Shape shapes[] = {
      {"mlp fc1 y=xW^T", false, true, 256, 1024, 784},   {"mlp fc2 y=xW^T", false, true, 256, 1024, 1024},
      {"mlp fc2 dx=dyW", false, false, 256, 1024, 1024}, {"mlp fc2 dW=dy^Tx", true, false, 1024, 1024, 256},
      {"mlp fc1 dW=dy^Tx", true, false, 1024, 784, 256}, {"gpt qkv y=xW^T", false, true, 2048, 768, 256},
      {"gpt fc y=xW^T", false, true, 2048, 1024, 256},   {"gpt proj y=xW^T", false, true, 2048, 256, 1024},
      {"gpt fc dW=dy^Tx", true, false, 1024, 256, 2048}, {"gpt logits y=xW^T", false, true, 2048, 256, 256},
      {"lenet conv1 y=W col", false, false, 32, 36 * 576, 25},
      {"lenet conv2 y=W col", false, false, 64, 20 * 64, 800},
      {"lenet conv2 dcol=W^T dy", true, false, 800, 20 * 64, 64},
      {"lenet conv2 dW=dy col^T", false, true, 64, 800, 20 * 64},
      {"lenet fc1 y=xW^T", false, true, 128, 1024, 1024},
  };
  std::printf("BLIS configuration: %s\n", blis_arch());
  std::printf("%-26s %5s %5s %5s  threads  openblas  onednn    blis  (GFLOP/s, median of %d)\n", "GEMM", "M", "N",
              "K", reps);
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    openblas_set_num_threads(threads);
    blis_threads(threads);
    for (const auto& s : shapes) {
      const int64_t lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
      std::vector<float> a(static_cast<size_t>(s.m) * s.k), b(static_cast<size_t>(s.k) * s.n),
          c(static_cast<size_t>(s.m) * s.n);
      for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 17) * 0.01f - 0.08f;
      for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 13) * 0.01f - 0.06f;
      std::vector<double> t[3];
      auto time = [](auto&& f) {
        auto t0 = std::chrono::steady_clock::now();
        f();
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      };
      for (int r = 0; r < reps + 1; ++r) {
        double x = time([&] {
          cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans, s.m, s.n, s.k,
                      1.f, a.data(), lda, b.data(), ldb, 0.f, c.data(), s.n);
        });
        double y = time([&] {
          dnnl_sgemm(s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', s.m, s.n, s.k, 1.f, a.data(), lda, b.data(), ldb, 0.f, c.data(),
                     s.n);
        });
        double z = time([&] { blis_sgemm_rm(s.ta, s.tb, s.m, s.n, s.k, a.data(), lda, b.data(), ldb, 0.f, c.data(), s.n); });
        if (r == 0) continue;  // first call: packing buffers, thread start
        t[0].push_back(x), t[1].push_back(y), t[2].push_back(z);
      }
      const double flops = 2.0 * s.m * s.n * s.k;
      std::printf("%-26s %5d %5d %5d  %7d", s.what, s.m, s.n, s.k, threads);
      for (auto& v : t) {
        std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
        std::printf("  %7.1f", flops / v[v.size() / 2] / 1e9);
      }
      std::printf("\n");
    }
  }
}
