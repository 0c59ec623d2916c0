// Capture and restore of the training state; see train_state.h.
#include "exec/train_state.h"

#include <map>

#include "core/finite.h"
#include "core/rng.h"

namespace braid::exec {
namespace {

std::vector<std::pair<std::string, TensorDesc>> expected_tensors(const ParamStore& store) {
  std::vector<std::pair<std::string, TensorDesc>> out;
  for (const auto& e : store.entries()) out.emplace_back(e.name, e.value.desc());
  return out;
}

void copy_into(const Tensor& src, ParamEntry& e, const std::string& path) {
  if (src.desc() != e.value.desc())
    throw UserError(SourceLoc{path, 0, 0}, "tensor '" + e.name + "' is " + src.desc().str() +
                                              " in the checkpoint but " + e.value.desc().str() + " in the model");
  e.value.copy_from(src);
}

io::Checkpoint weights_of(const io::RunConfig& cfg, const ParamStore& store) {
  io::Checkpoint c;
  c.meta.run_path = cfg.path;
  c.meta.model_path = cfg.model_path;
  c.meta.run_text = cfg.text;
  c.meta.model_text = cfg.model.text;
  for (const auto& e : store.entries()) (e.spec.buffer ? c.buffers : c.params).emplace_back(e.name, e.value);
  return c;
}

}  // namespace

void refuse_non_finite(const io::Checkpoint& c, const io::RunConfig& cfg, int64_t step) {
  io::for_each_tensor(c, [&](const std::string& name, const Tensor& t, int) {
    if (const NonFinite nf = find_non_finite(t); nf.count > 0)
      throw UserError(SourceLoc{cfg.path, 0, 0},
                      "not saving the checkpoint of step " + std::to_string(step) + ": tensor '" + name + "' holds " +
                          describe(nf) + "; the previous checkpoint and 'latest' are untouched",
                      "the run diverged: lower the learning rate or enable optimizer.clip_grad_norm, and resume "
                      "from the last checkpoint");
  });
}

io::Checkpoint capture(const io::RunConfig& cfg, const ParamStore& store, Optimizer& opt,
                       const io::BatchSampler& sampler, const StepState& s) {
  io::Checkpoint c = weights_of(cfg, store);
  c.meta.step = s.step;
  c.meta.epoch = sampler.epoch();
  c.meta.samples_seen = s.step * cfg.train.batch;
  c.meta.wall_time_s = s.wall_time_s;
  for (auto& [param, states] : opt.state())
    for (auto& [name, t] : states) c.optimizer.push_back({param, name, t});
  c.optimizer_steps = opt.steps_taken();
  c.optimizer_type = cfg.optimizer.type;
  c.loss_scale = opt.loss_scale.scale;
  c.loss_scale_growth_tracker = opt.loss_scale.growth_tracker;
  const uint64_t seed = cfg.train.seed;
  // Dropout masks of a run draw from hash(seed, run index); the run index is step * micro_batches + m.
  c.rng.push_back({"dropout", hash_key(seed, 0), static_cast<uint64_t>(s.step * s.micro_batches)});
  // Shuffling draws one permutation per epoch from (seed, epoch): the stream is the epoch counter.
  c.rng.push_back({"shuffle", seed, static_cast<uint64_t>(sampler.epoch())});
  // Initialisation draws from (seed, parameter name); it is not used again after step 0.
  c.rng.push_back({"init", seed, 0});
  c.data = {sampler.epoch(), sampler.position(), seed};
  return c;
}

StepState restore(const io::Checkpoint& c, const std::string& path, const io::RunConfig& cfg, ParamStore& store,
                  Optimizer& opt, io::BatchSampler& sampler) {
  auto problems = io::compare_to_model(c, expected_tensors(store));
  if (!problems.empty())
    throw UserError(SourceLoc{path, 0, 0}, "this checkpoint does not belong to the run's model: " + problems.front(),
                    "--init-from CHECKPOINT --init-partial starts from the tensors that match");
  if (c.optimizer_type != cfg.optimizer.type)
    throw UserError(SourceLoc{path, 0, 0},
                    "the checkpoint holds " + (c.optimizer_type.empty() ? std::string("no") : c.optimizer_type) +
                        " optimizer state but the run uses " + cfg.optimizer.type,
                    "resume with the same optimizer, or start from its weights with --init-from");
  if (c.data.seed != cfg.train.seed)
    throw UserError(SourceLoc{path, 0, 0}, "the checkpoint was trained with seed " + std::to_string(c.data.seed) +
                                              " but the run says " + std::to_string(cfg.train.seed),
                    "an exact resume needs the same train.seed");
  for (const auto& group : {&c.params, &c.buffers})
    for (const auto& [name, t] : *group) copy_into(t, *store.find(name), path);
  std::map<std::pair<std::string, std::string>, const Tensor*> saved;
  for (const auto& e : c.optimizer) saved[{e.param, e.state}] = &e.value;
  for (auto& [param, states] : opt.state())
    for (auto& [name, t] : states) {
      auto it = saved.find({param, name});
      if (it == saved.end())
        throw UserError(SourceLoc{path, 0, 0}, "optimizer state '" + param + "/" + name + "' is missing");
      if (it->second->desc() != t.desc())
        throw UserError(SourceLoc{path, 0, 0}, "optimizer state '" + param + "/" + name + "' is " +
                                                  it->second->desc().str() + ", expected " + t.desc().str());
      t.copy_from(*it->second);
    }
  opt.set_steps_taken(c.optimizer_steps);
  opt.loss_scale = LossScaleState{c.loss_scale, c.loss_scale_growth_tracker};
  sampler.restore(c.data.epoch, c.data.position);
  StepState s;
  s.step = c.meta.step;
  s.wall_time_s = c.meta.wall_time_s;
  return s;
}

void load_weights(const std::string& path, ParamStore& store, bool partial, FILE* out) {
  io::ReadOptions ro;
  ro.weights_only = true;
  io::Checkpoint c = io::read_checkpoint(path, ro);
  std::map<std::string, const Tensor*> have;
  for (const auto& group : {&c.params, &c.buffers})
    for (const auto& [name, t] : *group) have[name] = &t;
  std::vector<std::string> skipped;
  for (auto& e : store.entries()) {
    auto it = have.find(e.name);
    std::string why;
    if (it == have.end()) why = "not in the checkpoint";
    else if (it->second->desc() != e.value.desc())
      why = "is " + it->second->desc().str() + " in the checkpoint, " + e.value.desc().str() + " in the model";
    if (why.empty()) {
      e.value.copy_from(*it->second);
      have.erase(it);
      continue;
    }
    if (!partial)
      throw UserError(SourceLoc{path, 0, 0}, "tensor '" + e.name + "' " + why,
                      "--init-partial loads the tensors that match and lists the others");
    skipped.push_back(e.name + " (" + why + "; keeps its initial value)");
    if (it != have.end()) have.erase(it);
  }
  for (const auto& [name, t] : have) {
    if (!partial)
      throw UserError(SourceLoc{path, 0, 0}, "tensor '" + name + "' is not a parameter of this model",
                      "--init-partial loads the tensors that match and lists the others");
    skipped.push_back(name + " (in the checkpoint only; ignored)");
  }
  if (!skipped.empty()) {
    std::fprintf(out, "braid: --init-partial: %zu tensor(s) not loaded from %s:\n", skipped.size(), path.c_str());
    for (const auto& s : skipped) std::fprintf(out, "  %s\n", s.c_str());
  }
}

void save_weights(const std::string& path, const io::RunConfig& cfg, const ParamStore& store) {
  io::write_checkpoint(path, weights_of(cfg, store));
}

}  // namespace braid::exec
