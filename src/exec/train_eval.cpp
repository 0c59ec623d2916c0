// Evaluation of a training run (train_parts.h, Evaluation): when it is due and the loss and metrics over the
// evaluation set, batch by batch on the engine's evaluator (a forward-only program on plan device 0), averaged
// over samples. It reads the host model's parameters and changes nothing.
#include <algorithm>

#include "exec/train_parts.h"

namespace braid::exec {

bool Evaluation::due(int64_t step, int64_t total_steps, const io::BatchSampler& sampler) const {
  // The epoch ends when the sampler has no full batch left in it.
  const bool epoch_end = sampler.position() >= sampler.batches_per_epoch() * cfg_.train.batch;
  return data_ && ((cfg_.eval.every_steps > 0 && (step + 1) % cfg_.eval.every_steps == 0) ||
                   (cfg_.eval.every_steps == 0 && cfg_.train.epochs && epoch_end && step + 1 < total_steps));
}

Scores Evaluation::during_training(Engine& engine, ParamStore& store, bool rank0, io::TraceLane* lane) {
  io::TraceScope scope(lane, io::TraceLabel{io::TraceKind::Eval, {}, {}, "eval"});
  engine.gather(store, nullptr);  // a collective: every process, then rank 0 evaluates
  return rank0 ? run(engine, store) : Scores{};
}

int64_t Evaluation::samples() const {
  return cfg_.eval.batches > 0 ? std::min(data_->size(), cfg_.eval.batches * cfg_.train.batch) : data_->size();
}

Scores Evaluation::run(Engine& engine, ParamStore& store) {
  const int64_t batch = cfg_.train.batch;
  const int64_t n = samples();
  Scores sums;
  std::vector<int64_t> idx;
  for (int64_t start = 0; start < n; start += batch) {
    const int64_t b = std::min(batch, n - start);
    idx.resize(static_cast<size_t>(b));
    for (int64_t i = 0; i < b; ++i) idx[static_cast<size_t>(i)] = start + i;
    const auto vals = engine.evaluate(store, *data_, idx);
    if (sums.empty())
      for (const auto& [k, v] : vals) sums.emplace_back(k, 0.0);
    for (size_t k = 0; k < vals.size(); ++k) sums[k].second += vals[k].second * static_cast<double>(b);
  }
  for (auto& [k, v] : sums) v /= static_cast<double>(std::max<int64_t>(n, 1));
  return sums;
}

}  // namespace braid::exec
