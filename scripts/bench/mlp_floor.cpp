// The floor of the MLP benchmark's step (configs/bench/mlp.yaml: 784-1024-1024-10, batch 256, SGD with momentum)
// for any program that calls oneDNN's dnnl_sgemm: the step's GEMMs and its update alone, with no framework, as
// plain C++ in the order braid runs them, on braid's panels (src/ops/cpu/kernel_util.cpp: one block of C's rows,
// or columns, per OpenMP thread, starts at multiples of 16, products under 2 MFLOP on one thread). Left out: the
// biases, the relus, the loss and the copy of the batch, so braid's step can only be slower. scripts/bench/
// mlp_floor.sh runs it beside `braid bench` and the SGEMM ceiling.
// Prints one JSON line: the median and min-max over windows of `window` steps (after `warmup`) of samples/s, the
// GFLOP/s of the FLOPs `braid bench` counts for this model (forward, and backward without the first layer's
// input gradient), and the median time of each GEMM and of the update in ms.
// usage: mlp_floor [steps=300] [warmup=20] [window=10]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_panels.h"

namespace {

using bench::gemm;
using Clock = std::chrono::steady_clock;

// SGD with momentum 0.9 (PyTorch's: buf = 0.9 buf + g; p -= lr buf), over contiguous halves as braid's
// parallel_for splits it.
void sgd(float* __restrict p, const float* __restrict g, float* __restrict buf, int64_t n) {
  const int threads = omp_get_max_threads();
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(threads, (n + (1 << 15) - 1) / (1 << 15)));
  const int64_t per = (n + chunks - 1) / chunks;
#pragma omp parallel for schedule(static) num_threads(static_cast<int>(chunks))
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t b = c * per, e = std::min(n, b + per);
    for (int64_t i = b; i < e; ++i) {
      buf[i] = 0.9f * buf[i] + g[i];
      p[i] = p[i] - 0.01f * buf[i];
    }
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::vector<float> filled(size_t n, int mul) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(static_cast<int>((i * mul) % 13) - 6) * 0.01f;
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 300;
  const int warmup = argc > 2 ? std::atoi(argv[2]) : 20;
  const int window = argc > 3 ? std::atoi(argv[3]) : 10;
  if (steps < window || window < 1 || warmup < 0) {
    std::fprintf(stderr, "usage: mlp_floor [steps >= window] [warmup >= 0] [window >= 1]\n");
    return 2;
  }
  constexpr int64_t B = 256, I = 784, H = 1024, O = 10;
  auto x = filled(B * I, 7), w1 = filled(H * I, 5), w2 = filled(H * H, 3), w3 = filled(O * H, 11);
  auto dlog = filled(B * O, 9);
  std::vector<float> h1(B * H), h2(B * H), logits(B * O), dh2(B * H), dh1(B * H);
  std::vector<float> g1(H * I), g2(H * H), g3(O * H), m1(H * I), m2(H * H), m3(O * H);
  std::vector<float> b1(H), b2(H), b3(O), gb1(H), gb2(H), gb3(O), mb1(H), mb2(H), mb3(O);
  struct Op {
    const char* name;
    double flops;
  };
  const Op ops[] = {{"fc1 y NT", 2.0 * B * H * I},   {"fc2 y NT", 2.0 * B * H * H},  {"logits y NT", 2.0 * B * O * H},
                    {"logits dx NN", 2.0 * B * H * O}, {"logits dW TN", 2.0 * O * H * B}, {"fc2 dx NN", 2.0 * B * H * H},
                    {"fc2 dW TN", 2.0 * H * H * B},  {"fc1 dW TN", 2.0 * H * I * B},  {"sgd", 0}};
  constexpr int kOps = 9;
  double step_flops = 0;
  for (const Op& op : ops) step_flops += op.flops;
  auto run = [&](int j) {
    switch (j) {
      case 0: gemm(false, true, B, H, I, x.data(), I, w1.data(), I, h1.data(), H); break;
      case 1: gemm(false, true, B, H, H, h1.data(), H, w2.data(), H, h2.data(), H); break;
      case 2: gemm(false, true, B, O, H, h2.data(), H, w3.data(), H, logits.data(), O); break;
      case 3: gemm(false, false, B, H, O, dlog.data(), O, w3.data(), H, dh2.data(), H); break;
      case 4: gemm(true, false, O, H, B, dlog.data(), O, h2.data(), H, g3.data(), H); break;
      case 5: gemm(false, false, B, H, H, dh2.data(), H, w2.data(), H, dh1.data(), H); break;
      case 6: gemm(true, false, H, H, B, dh2.data(), H, h1.data(), H, g2.data(), H); break;
      case 7: gemm(true, false, H, I, B, dh1.data(), H, x.data(), I, g1.data(), I); break;
      case 8:
        sgd(w1.data(), g1.data(), m1.data(), H * I);
        sgd(b1.data(), gb1.data(), mb1.data(), H);
        sgd(w2.data(), g2.data(), m2.data(), H * H);
        sgd(b2.data(), gb2.data(), mb2.data(), H);
        sgd(w3.data(), g3.data(), m3.data(), O * H);
        sgd(b3.data(), gb3.data(), mb3.data(), O);
        break;
    }
  };
  for (int s = 0; s < warmup; ++s)
    for (int j = 0; j < kOps; ++j) run(j);
  std::vector<std::vector<double>> op_ms(kOps);
  std::vector<double> sps;
  double win_s = 0;
  for (int s = 0; s < steps; ++s) {
    for (int j = 0; j < kOps; ++j) {
      const auto t0 = Clock::now();
      run(j);
      const double d = std::chrono::duration<double>(Clock::now() - t0).count();
      op_ms[j].push_back(d * 1e3);
      win_s += d;
    }
    if ((s + 1) % window == 0) {
      sps.push_back(static_cast<double>(B) * window / win_s);
      win_s = 0;
    }
  }
  const double med = median(sps);
  std::printf("{\"threads\": %d, \"batch\": %lld, \"step_gflop\": %.4f, \"samples_per_s\": %.1f, "
              "\"samples_per_s_min\": %.1f, \"samples_per_s_max\": %.1f, \"gflops\": %.1f, \"op_ms\": {",
              omp_get_max_threads(), static_cast<long long>(B), step_flops / 1e9, med,
              *std::min_element(sps.begin(), sps.end()), *std::max_element(sps.begin(), sps.end()),
              step_flops / B * med / 1e9);
  for (int j = 0; j < kOps; ++j) std::printf("%s\"%s\": %.3f", j ? ", " : "", ops[j].name, median(op_ms[j]));
  std::printf("}}\n");
  return 0;
}
