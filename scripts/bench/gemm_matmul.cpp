// oneDNN's matmul primitive (brgemm kernels, its own threading over the whole product) against braid's float GEMM
// path (dnnl_sgemm on one panel of C per OpenMP thread, ops/cpu/kernel_util.cpp) on the GEMMs of the benchmark
// models, as braid calls them (row-major, the transposes and beta it passes). The two alternate call by call;
// prints the median GFLOP/s of each and their ratio. usage: gemm_matmul [calls=400] (OMP_NUM_THREADS threads)
#include <dnnl.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <oneapi/dnnl/dnnl.hpp>
#include <vector>

namespace {
using dnnl::memory;

// braid's path: one block of rows (or columns) of C per thread, starting at multiples of 16.
void panels(char ta, char tb, long m, long n, long k, const float* a, long lda, const float* b, long ldb, float beta,
            float* c, long ldc) {
  const int threads = omp_get_max_threads();
  const bool rows = m >= n;
  const long dim = rows ? m : n, per = ((dim + threads - 1) / threads + 15) / 16 * 16;
#pragma omp parallel num_threads(threads)
  {
    const long lo = std::min(dim, omp_get_thread_num() * per), hi = std::min(dim, lo + per);
    omp_set_num_threads(1);
    if (hi > lo && rows)
      dnnl_sgemm(ta, tb, hi - lo, n, k, 1, ta == 'T' ? a + lo : a + lo * lda, lda, b, ldb, beta, c + lo * ldc, ldc);
    else if (hi > lo)
      dnnl_sgemm(ta, tb, m, hi - lo, k, 1, a, lda, tb == 'T' ? b + lo * ldb : b + lo, ldb, beta, c + lo, ldc);
  }
}

struct Shape {
  char ta, tb;
  long m, n, k;
  float beta;
  const char* use;
};
}  // namespace

int main(int argc, char** argv) {
  const int calls = argc > 1 ? std::atoi(argv[1]) : 400;
  const Shape shapes[] = {
      {'N', 'T', 256, 1024, 784, 1, "mlp fc1 y = x W^T + b"},  {'N', 'T', 256, 1024, 1024, 1, "mlp fc2 y"},
      {'N', 'N', 256, 1024, 1024, 0, "mlp fc2 dx = dy W"},     {'T', 'N', 1024, 1024, 256, 0, "mlp fc2 dW = dy^T x"},
      {'T', 'N', 1024, 784, 256, 0, "mlp fc1 dW"},              {'N', 'T', 2048, 768, 256, 1, "gpt qkv y"},
      {'N', 'T', 2048, 1024, 256, 1, "gpt fc y"},               {'N', 'T', 2048, 256, 1024, 1, "gpt proj y"},
      {'N', 'N', 2048, 1024, 256, 0, "gpt proj dx"},            {'N', 'N', 2048, 256, 1024, 0, "gpt fc dx"},
      {'T', 'N', 1024, 256, 2048, 0, "gpt fc dW"},              {'N', 'T', 128, 1024, 1024, 1, "lenet fc y"},
      {'T', 'N', 1024, 1024, 128, 0, "lenet fc dW"},            {'N', 'N', 128, 1024, 1024, 0, "lenet fc dx"},
  };
  std::vector<float> A(1 << 22), B(1 << 22), C(1 << 22, 0.0f);
  for (size_t i = 0; i < A.size(); ++i) A[i] = static_cast<float>(i % 13) / 13.0f - 0.5f, B[i] = static_cast<float>(i % 11) / 11.0f - 0.5f;
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream s(eng);
  std::printf("%d threads; median GFLOP/s of %d calls each, alternating\n", omp_get_max_threads(), calls);
  std::printf("%-24s %-22s %8s %8s %8s\n", "GEMM", "M x N x K", "panels", "matmul", "ratio");
  for (const Shape& q : shapes) {
    const long lda = q.ta == 'T' ? q.m : q.k, ldb = q.tb == 'T' ? q.k : q.n, ldc = q.n;
    memory::desc ad({q.m, q.k}, memory::data_type::f32, q.ta == 'T' ? memory::dims{1, lda} : memory::dims{lda, 1});
    memory::desc bd({q.k, q.n}, memory::data_type::f32, q.tb == 'T' ? memory::dims{1, ldb} : memory::dims{ldb, 1});
    memory::desc cd({q.m, q.n}, memory::data_type::f32, memory::dims{ldc, 1});
    dnnl::primitive_attr attr;
    if (q.beta != 0) {
      dnnl::post_ops po;
      po.append_sum(q.beta);
      attr.set_post_ops(po);
    }
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(ad, bd, cd), attr, eng);
    dnnl::matmul mm(pd);
    memory am(ad, eng, A.data()), bm(bd, eng, B.data()), cm(cd, eng, C.data());
    std::vector<double> t[2];
    for (int r = 0; r < 2 * calls + 20; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      if (r & 1) {
        mm.execute(s, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
        s.wait();
      } else {
        panels(q.ta, q.tb, q.m, q.n, q.k, A.data(), lda, B.data(), ldb, q.beta, C.data(), ldc);
      }
      if (r >= 20) t[r & 1].push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    for (auto& v : t) std::sort(v.begin(), v.end());
    const double flop = 2.0 * q.m * q.n * q.k / 1e9, p = t[0][t[0].size() / 2], m = t[1][t[1].size() / 2];
    char dims[64];
    std::snprintf(dims, sizeof dims, "%c%c %ld x %ld x %ld", q.ta, q.tb, q.m, q.n, q.k);
    std::printf("%-24s %-22s %8.0f %8.0f %8.2f\n", q.use, dims, flop / p, flop / m, p / m);
  }
  return 0;
}
