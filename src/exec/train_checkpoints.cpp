// Checkpointing of a training run (train_parts.h, Checkpoints): resume, the cadence and the save. What a
// checkpoint holds and how it is put back is train_state.h's; the folder, `latest` and the files are
// io::CheckpointDir's. A save is a collective (every process gathers its shards); only rank 0 writes.
#include "exec/signals.h"
#include "exec/train_parts.h"

namespace braid::exec {

Checkpoints::Checkpoints(const io::RunConfig& cfg, Engine& engine, ParamStore& store, Optimizer& opt,
                         io::BatchSampler& sampler)
    : cfg_(cfg), engine_(engine), store_(store), opt_(opt), sampler_(sampler) {
  state_.micro_batches = engine.plan().summary.micro_batches;
}

void Checkpoints::resume(const std::string& path, int64_t total_steps, FILE* out) {
  state_ = restore(io::read_checkpoint(path), path, cfg_, store_, opt_, sampler_);
  state_.micro_batches = engine_.plan().summary.micro_batches;
  std::fprintf(out, "braid: resuming from %s at step %lld (epoch %lld)\n", path.c_str(),
               static_cast<long long>(state_.step), static_cast<long long>(sampler_.epoch()));
  if (state_.step >= total_steps)
    std::fprintf(out, "braid: the checkpoint is already at step %lld of %lld; nothing to train\n",
                 static_cast<long long>(state_.step), static_cast<long long>(total_steps));
}

void Checkpoints::open(bool rank0) {
  if (!cfg_.checkpoint.dir.empty() && rank0)
    dir_ = std::make_unique<io::CheckpointDir>(cfg_.checkpoint.dir, cfg_.checkpoint.keep);
  StopSignals::set_stop_message(cfg_.checkpoint.dir.empty()
                                    ? "braid: stopping after this step (no checkpoint.dir: nothing will be saved); signal again to quit at once"
                                    : "braid: stopping after this step (saving a checkpoint); signal again to quit at once");
}

void Checkpoints::step_done(int64_t steps) {
  state_.step = steps;
  state_.wall_time_s += std::chrono::duration<double>(TrainClock::now() - step_start_).count();
  step_start_ = TrainClock::now();
}

bool Checkpoints::due(int64_t steps, int64_t total_steps, bool stop) const {
  const bool every = cfg_.checkpoint.every_steps > 0 && steps % cfg_.checkpoint.every_steps == 0;
  return every || stop || steps == total_steps;
}

std::string Checkpoints::save(io::TraceLane* lane) {
  io::TraceScope scope(lane, io::TraceLabel{io::TraceKind::Checkpoint, {}, {}, "save"});
  if (cfg_.checkpoint.dir.empty()) return {};
  engine_.gather(store_, &opt_);  // a collective of every process
  if (!dir_) return {};
  io::Checkpoint c = capture(cfg_, store_, opt_, sampler_, state_);
  refuse_non_finite(c, cfg_, state_.step);  // a diverged state never replaces `latest`
  return dir_->save(c);
}

}  // namespace braid::exec
