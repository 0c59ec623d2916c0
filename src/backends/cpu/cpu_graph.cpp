// make_cpu_graph and accumulate (cpu_graph.h).
#include "backends/cpu/cpu_graph.h"

#include <algorithm>

#include "graph/build.h"
#include "graph/verify.h"
#include "ops/cpu/kernel_util.h"

namespace braid::exec {

std::unique_ptr<CpuGraph> make_cpu_graph(const io::ModelSpec& m, int64_t batch, bool training, ParamStore& store,
                                    uint64_t seed, const CpuGraphOptions& options) {
  graph::BuildOptions bo;
  bo.with_backward = training;
  bo.with_metrics = !training;
  return make_cpu_graph(graph::build_graph(m, batch, bo), m, store, seed, options);
}

std::unique_ptr<CpuGraph> make_cpu_graph(const graph::Graph& g, const io::ModelSpec& m, ParamStore& store, uint64_t seed,
                                    const CpuGraphOptions& options) {
  auto r = std::make_unique<CpuGraph>();
  r->g = g;
  graph::verify(r->g);
  store.create(r->g, seed);
  std::vector<ValueId> keep;
  for (const auto& [n, v] : r->g.outputs) keep.push_back(v);
  for (const auto& [n, v] : r->g.metrics) keep.push_back(v);
  for (const auto& p : r->g.params())
    if (p.grad.valid()) keep.push_back(p.grad);
  ExecutorOptions eo;
  eo.fuse = options.fuse;
  r->exec = std::make_unique<Executor>(r->g, store, keep, eo);
  for (const auto& in : m.inputs) r->inputs.push_back(r->exec->input(in.name));
  return r;
}

void accumulate(Tensor& dst, const Tensor& src, double scale, bool first) {
  ops::cpu::dispatch_float(dst.dtype(), [&]<typename T>() {
    T* d = dst.data<T>();
    const T* s = src.data<T>();
    const T k = T(scale);
    parallel_for(dst.numel(), 1 << 15, [&](int64_t b, int64_t e) {
      if (first && scale == 1.0)
        std::copy(s + b, s + e, d + b);
      else if (first)
        for (int64_t i = b; i < e; ++i) d[i] = s[i] * k;
      else
        for (int64_t i = b; i < e; ++i) d[i] += s[i] * k;
    });
  });
}


}  // namespace braid::exec
