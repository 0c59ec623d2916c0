// Runner construction and the helpers of runner.h.
#include "exec/runner.h"

#include <algorithm>

#include "graph/build.h"
#include "graph/verify.h"
#include "ops/cpu/kernel_util.h"

namespace braid::exec {

std::vector<io::DatasetInput> dataset_inputs(const io::ModelSpec& m, const graph::Graph& g) {
  auto bounds = graph::integer_input_bounds(g);
  std::vector<io::DatasetInput> out;
  for (const auto& in : m.inputs)
    out.push_back({in.name, TensorDesc{Shape(in.shape), in.dtype}, bounds.count(in.name) ? bounds[in.name] : 0});
  return out;
}

namespace {
// The file a data source reads, as a message names it: "'data/train.h5'", "synthetic".
std::string describe_source(const io::DataSourceSpec& d) {
  if (d.format == "synthetic") return "(synthetic)";
  if (d.format == "idx") return "'" + d.images + "'";
  return "'" + d.path + "'";
}
}  // namespace

std::unique_ptr<io::Dataset> open_train_data(const io::RunConfig& cfg, const std::vector<io::DatasetInput>& inputs) {
  auto data = io::open_dataset(cfg.data.train, inputs, cfg.train.seed);
  if (data->size() < cfg.train.batch)
    throw UserError(cfg.data.train.loc, "the training set " + describe_source(cfg.data.train) + " has " +
                                            std::to_string(data->size()) + " samples, fewer than one batch of " +
                                            std::to_string(cfg.train.batch),
                    "use a smaller train.batch or more data");
  return data;
}

int64_t tokens_per_sample(const std::vector<io::DatasetInput>& inputs) {
  for (const auto& in : inputs)
    if (is_int(in.sample.dtype) && in.sample.shape.rank() >= 1) return in.sample.shape.numel();
  return 0;
}

std::unique_ptr<Runner> make_runner(const io::ModelSpec& m, int64_t batch, bool training, ParamStore& store,
                                    uint64_t seed, const RunnerOptions& options) {
  graph::BuildOptions bo;
  bo.with_backward = training;
  bo.with_metrics = !training;
  return make_runner(graph::build_graph(m, batch, bo), m, store, seed, options);
}

std::unique_ptr<Runner> make_runner(const graph::Graph& g, const io::ModelSpec& m, ParamStore& store, uint64_t seed,
                                    const RunnerOptions& options) {
  auto r = std::make_unique<Runner>();
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

double scalar(const Tensor& t) { return get_as_double(t, 0); }

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
