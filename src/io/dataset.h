// Datasets bound to a model's inputs, and the per-epoch shuffling sampler. A dataset yields per-sample
// fields; binding maps them to the model's inputs in order unless the run file's `bind` says otherwise.
// Reading a batch writes into caller-owned tensors: no allocation per step.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/run_config.h"

namespace braid::io {

struct DatasetInput {
  std::string name;       // model input name
  TensorDesc sample;      // per-sample desc (no batch axis)
  int64_t int_bound = 0;  // integer inputs: values lie in [0, int_bound) (synthetic data draws below it)
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  // Writes the samples `indices` into out[k] (one per bound model input, shape [indices.size(), sample...]).
  // Safe to call from several threads at once with distinct `out` tensors (the data is loaded and immutable
  // after open_dataset; data/source.h's readers promise the same): the devices of a plan read their micro-batches
  // in parallel.
  virtual void read(std::span<const int64_t> indices, std::span<Tensor> out) const = 0;
  // Human-readable description ("idx: 60000 samples from ...").
  virtual std::string describe() const = 0;
};

// Opens `spec` for the model inputs `inputs`; checks field shapes, dtypes and counts against them.
// Throws UserError located at spec.loc on any mismatch or unreadable file. `seed` drives synthetic data.
// The whole source is loaded into memory here; read() copies (and converts) only, and never throws UserError.
std::unique_ptr<Dataset> open_dataset(const DataSourceSpec& spec, const std::vector<DatasetInput>& inputs,
                                      uint64_t seed);

// Epoch-wise order of sample indices: a permutation drawn from (seed, epoch) when shuffling, else identity.
// The state (epoch, position) is what a checkpoint stores to resume mid-epoch; position counts samples
// (not batches) taken in the epoch, so a resumed run may change the batch size. With drop_last a final
// partial batch is skipped; without it the epoch's last batch may be short.
class BatchSampler {
 public:
  // Throws UserError when drop_last leaves no batch at all (dataset smaller than one batch).
  BatchSampler(int64_t dataset_size, int64_t batch, bool shuffle, uint64_t seed, bool drop_last = true);
  // The indices of the next batch; advances position and wraps into the next epoch when needed.
  std::vector<int64_t> next();
  // Same as next() without allocating: a view valid until the next call to next(), next_view() or restore().
  std::span<const int64_t> next_view();
  int64_t epoch() const { return epoch_; }
  int64_t position() const { return position_; }
  int64_t batches_per_epoch() const;
  // Resumes at (epoch, position) as saved; throws UserError when they do not fit this dataset.
  void restore(int64_t epoch, int64_t position);

 private:
  void make_order();
  int64_t size_, batch_;
  bool shuffle_, drop_last_;
  uint64_t seed_;
  int64_t epoch_ = 0, position_ = 0;
  std::vector<int64_t> order_;
};

}  // namespace braid::io
