// The GPU benchmark of scripts/gpu_check.sh (skipped unless BRAID_GPU_BENCH=1): models/bench/gpt2_124m.yaml,
// fp32, forward+backward through CudaExecutor (no optimizer step, no host copies of gradients), batch from
// BRAID_GPU_BENCH_BATCH (default 4). Prints one line "BENCH tokens_per_s=<x> params=<n>" for the script.
#include <chrono>
#include <cstdlib>

#include "exec/cuda/cuda_executor.h"
#include "graph/build.h"
#include "gpu_util.h"
#include "io/model_spec.h"

using namespace braid;

TEST(GpuBench, Gpt2ForwardBackward) {
  BRAID_REQUIRE_GPU();
  if (!std::getenv("BRAID_GPU_BENCH")) GTEST_SKIP() << "set BRAID_GPU_BENCH=1 to run the benchmark";
  const char* b = std::getenv("BRAID_GPU_BENCH_BATCH");
  int64_t batch = b ? std::atoll(b) : 4;
  Diagnostics d;
  io::ModelSpec m = io::load_model(std::string(BRAID_SOURCE_DIR) + "/models/bench/gpt2_124m.yaml", {}, d);
  d.throw_if_any();
  graph::BuildOptions bo;
  bo.with_backward = true;
  graph::Graph g = graph::build_graph(m, batch, bo);
  exec::ParamStore store;
  store.create(g, 1);
  std::vector<ValueId> keep{g.loss()};
  for (const auto& p : g.params())
    if (p.grad.valid()) keep.push_back(p.grad);
  exec::CudaExecutorOptions co;
  co.mirror_keep = false;
  exec::CudaExecutor ex(g, store, keep, {}, co);
  for (const auto& in : m.inputs) {
    const Tensor& t = ex.input(in.name);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<int32_t>()[i] = static_cast<int32_t>((i * 7919) % 50257);
  }
  for (int i = 0; i < 2; ++i) ex.run(true, 1, static_cast<uint64_t>(i));
  const int steps = 5;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) ex.run(true, 1, static_cast<uint64_t>(i + 2));
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int64_t params = 0;
  for (const auto& e : store.entries())
    if (!e.spec.buffer) params += e.value.numel();
  std::printf("BENCH tokens_per_s=%.1f params=%lld device_bytes=%zu\n",
              static_cast<double>(steps * batch * 1024) / s, static_cast<long long>(params), ex.device_bytes());
}
