// Single-threaded GEMM efficiency of OpenBLAS and oneDNN on the panels braid's float GEMM gives each thread
// (half of each benchmark GEMM on 2 threads, plus attention's per-head GEMMs), timed by the thread's CPU
// time (CLOCK_THREAD_CPUTIME_ID), so that other processes on a shared machine do not inflate the figures.
// GFLOP/s: the second-best of 7 repetitions, each the mean over enough calls for ~2 GFLOP; two passes per
// library, interleaved. Run by scripts/bench/gemm_panels.sh.
#include <cblas.h>
#include <dnnl.h>
#include <time.h>
#include <algorithm>
#include <cstdio>
#include <vector>
static double cpu_now() { timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
struct S { const char* w; int m, n, k; bool ta, tb; };
int main() {
  S ss[] = {{"mlp fc1 y=xW^T half", 256, 512, 784, false, true}, {"mlp fc2 y half", 256, 512, 1024, false, true},
            {"mlp fc2 dx=dyW half", 256, 512, 1024, false, false}, {"mlp fc2 dW half", 512, 1024, 256, true, false},
            {"mlp fc1 dW half", 512, 784, 256, true, false},
            {"gpt fc y half", 1024, 1024, 256, false, true}, {"gpt proj y half", 1024, 256, 1024, false, true},
            {"gpt fc dW half", 512, 256, 2048, true, false}, {"gpt qkv half", 1024, 768, 256, false, true},
            {"gpt fc dx half", 1024, 256, 1024, false, false}, {"attn qk", 128, 128, 64, false, true},
            {"attn pv", 128, 64, 128, false, false}};
  for (auto& s : ss) {
    int ar = s.ta ? s.k : s.m, ac = s.ta ? s.m : s.k, br = s.tb ? s.n : s.k, bc = s.tb ? s.k : s.n;
    std::vector<float> A((size_t)ar * ac), B((size_t)br * bc), C((size_t)s.m * s.n), C2((size_t)s.m * s.n);
    for (size_t i = 0; i < A.size(); ++i) A[i] = (float)((i * 7919) % 1000) / 1000.f - 0.5f;
    for (size_t i = 0; i < B.size(); ++i) B[i] = (float)((i * 104729) % 1000) / 1000.f - 0.5f;
    double fl = 2.0 * s.m * s.n * s.k;
    int reps = std::max(3, (int)(2e9 / fl));
    auto run = [&](int lib) {
      std::vector<double> ts;
      for (int r = 0; r < 7; ++r) {
        double t0 = cpu_now();
        for (int q = 0; q < reps; ++q) {
          if (lib == 0) cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans, s.m, s.n, s.k, 1.f, A.data(), ac, B.data(), bc, 0.f, C.data(), s.n);
          else dnnl_sgemm(s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', s.m, s.n, s.k, 1.f, A.data(), ac, B.data(), bc, 0.f, C2.data(), s.n);
        }
        ts.push_back((cpu_now() - t0) / reps);
      }
      std::sort(ts.begin(), ts.end());
      return fl / ts[1] / 1e9;
    };
    double o = run(0), d = run(1), o2 = run(0), d2 = run(1);
    std::printf("%-22s %5d %5d %5d  openblas %6.1f %6.1f  onednn %6.1f %6.1f  ratio %.2f\n", s.w, s.m, s.n, s.k, o, o2, d, d2, std::max(d, d2) / std::max(o, o2));
  }
}
