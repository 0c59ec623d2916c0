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


// The small state of checkpoint `path` belongs to this run: the random streams are exactly the run's three,
// with the keys its seed gives and counters its step and epoch give, and the step counts agree. (The streams
// are recomputed from the step when training goes on; a checkpoint whose streams say otherwise was altered.)
void check_state(const io::Checkpoint& c, const std::string& path, const io::RunConfig& cfg) {
  const uint64_t seed = cfg.train.seed;
  const int64_t step = c.meta.step;
  auto refuse = [&](const std::string& what) {
    throw UserError(SourceLoc{path, 0, 0}, what, "the checkpoint was altered or comes from another run");
  };
  if (step < 0 || c.optimizer_steps < 0 || c.optimizer_steps > step)
    refuse("its optimizer has taken " + std::to_string(c.optimizer_steps) + " steps at step " + std::to_string(step));
  std::map<std::string, const io::RngStream*> streams;
  for (const auto& r : c.rng)
    if (!streams.emplace(r.name, &r).second) refuse("random stream '" + r.name + "' is there twice");
  auto expect = [&](const char* name, uint64_t key, bool (*counter_ok)(uint64_t counter, const io::Checkpoint&),
                    const std::string& counter_rule) {
    auto it = streams.find(name);
    if (it == streams.end()) refuse(std::string("random stream '") + name + "' is missing");
    const io::RngStream& r = *it->second;
    if (r.key != key || !counter_ok(r.counter, c))
      refuse(std::string("random stream '") + name + "' (key " + std::to_string(r.key) + ", counter " +
             std::to_string(r.counter) + ") is not the run's: seed " + std::to_string(seed) + " at step " +
             std::to_string(step) + " gives key " + std::to_string(key) + " and " + counter_rule);
    streams.erase(it);
  };
  // Dropout: step * micro-batches of the plan that ran (any plan: a multiple of the step, at least the step).
  expect("dropout", hash_key(seed, 0),
         [](uint64_t n, const io::Checkpoint& k) {
           const auto s = static_cast<uint64_t>(k.meta.step);
           return s == 0 ? n == 0 : n >= s && n % s == 0;
         },
         "a counter that is a multiple of the step");
  expect("shuffle", seed, [](uint64_t n, const io::Checkpoint& k) { return n == static_cast<uint64_t>(k.data.epoch); },
         "the data cursor's epoch " + std::to_string(c.data.epoch) + " as its counter");
  expect("init", seed, [](uint64_t n, const io::Checkpoint&) { return n == 0; }, "counter 0");
  if (!streams.empty()) refuse("random stream '" + streams.begin()->first + "' belongs to no part of a run");
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
  check_state(c, path, cfg);
  // Every optimizer state of the run is in the checkpoint, and nothing else is (a state of a parameter the
  // model lacks, or a state this optimizer does not keep, is foreign: the file was altered or is another run's).
  std::map<std::pair<std::string, std::string>, const Tensor*> saved;
  for (const auto& e : c.optimizer)
    if (!saved.emplace(std::pair{e.param, e.state}, &e.value).second)
      throw UserError(SourceLoc{path, 0, 0}, "optimizer state '" + e.param + "/" + e.state + "' is there twice");
  std::vector<std::pair<Tensor*, const Tensor*>> copies;  // made once everything is checked
  for (auto& [param, states] : opt.state())
    for (auto& [name, t] : states) {
      auto it = saved.find({param, name});
      if (it == saved.end())
        throw UserError(SourceLoc{path, 0, 0}, "optimizer state '" + param + "/" + name + "' is missing");
      if (it->second->desc() != t.desc())
        throw UserError(SourceLoc{path, 0, 0}, "optimizer state '" + param + "/" + name + "' is " +
                                                  it->second->desc().str() + ", expected " + t.desc().str());
      copies.emplace_back(&t, it->second);
      saved.erase(it);
    }
  if (!saved.empty()) {
    const auto& [key, t] = *saved.begin();
    throw UserError(SourceLoc{path, 0, 0},
                    "optimizer state '" + key.first + "/" + key.second + "' (" + t->desc().str() +
                        ") belongs to no parameter of the run's " + cfg.optimizer.type + " optimizer" +
                        (saved.size() > 1 ? " (and " + std::to_string(saved.size() - 1) + " more)" : ""),
                    "the checkpoint was altered or comes from another run");
  }
  try {
    sampler.restore(c.data.epoch, c.data.position);
  } catch (const UserError& e) {  // the sampler knows no file: name the checkpoint whose cursor it is
    const Diagnostic& d = e.diagnostics().front();
    throw UserError(SourceLoc{path, 0, 0}, "its data cursor: " + d.message, d.hint);
  }
  for (const auto& group : {&c.params, &c.buffers})
    for (const auto& [name, t] : *group) copy_into(t, *store.find(name), path);
  for (auto& [t, src] : copies) t->copy_from(*src);
  opt.set_steps_taken(c.optimizer_steps);
  opt.loss_scale = LossScaleState{c.loss_scale, c.loss_scale_growth_tracker};
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
