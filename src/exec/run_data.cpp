// The helpers of run_data.h.
#include "exec/run_data.h"

#include <algorithm>

#include "graph/build.h"

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

double scalar(const Tensor& t) { return get_as_double(t, 0); }

}  // namespace braid::exec
