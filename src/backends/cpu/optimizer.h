// Optimizers with PyTorch's exact update rules (torch.optim.SGD and torch.optim.AdamW, single-tensor
// path), gradient-norm clipping as torch.nn.utils.clip_grad_norm_, and the learning-rate schedules of
// MODEL_FORMAT.md. State tensors (momentum_buffer, exp_avg, exp_avg_sq) are named as PyTorch's.
#pragma once
#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "exec/loss_scale.h"
#include "exec/param_store.h"
#include "io/run_config.h"

namespace braid::exec {

class Optimizer {
 public:
  // `owned` (empty: all): the parameters this optimizer keeps state for and updates. Optimizer-state sharding
  // (ZeRO stage 1, plan `zero: 1`) gives each data-parallel replica its share; the others' values arrive by
  // broadcast after the update (exec/engine.cpp).
  Optimizer(const io::OptimizerSpec& spec, ParamStore& store, std::function<bool(const std::string&)> owned = {});
  // One update of every trainable parameter from its accumulated gradient, at learning rate lr.
  void step(double lr);
  int64_t steps_taken() const { return step_; }
  // Named state per parameter ("exp_avg", ...), for checkpoints.
  std::map<std::string, std::map<std::string, Tensor>>& state() { return state_; }
  const std::map<std::string, std::map<std::string, Tensor>>& state() const { return state_; }
  void set_steps_taken(int64_t s) { step_ = s; }
  // fp16 training's dynamic loss scale (exec/loss_scale.h), kept with the state for checkpoints; scale 0 in every
  // other run. The engine keeps it current when it gathers the state for a checkpoint (Engine::gather).
  LossScaleState loss_scale;

 private:
  io::OptimizerSpec spec_;
  ParamStore& store_;
  std::function<bool(const std::string&)> owned_;
  int64_t step_ = 0;
  std::map<std::string, std::map<std::string, Tensor>> state_;
};

// torch.nn.utils.clip_grad_norm_'s factor for gradients of global L2 norm `norm`: max_norm / (norm + 1e-6), at
// most 1 (every trainer that clips: on one device, Engine, the CUDA engine).
inline double clip_coefficient(double norm, double max_norm) { return std::min(1.0, max_norm / (norm + 1e-6)); }
// Scales all gradients so that their global L2 norm is at most max_norm; returns the norm before clipping.
double clip_grad_norm(ParamStore& store, double max_norm);
double grad_norm(const ParamStore& store);
// One tensor's sum of squares in double, in pieces fixed by its size (the same bits for any thread count),
// and g *= k on the threads; the building blocks of grad_norm and clip_grad_norm, shared with Engine.
double sum_squares(const Tensor& g);
void scale_in_place(Tensor& g, double k);

// Learning rate for optimizer step `step` (0-based) of `total`.
//   constant: lr;  step: lr * gamma^(step / step_size);
//   cosine: warmup lr * (step + 1) / warmup_steps, then min_lr + (lr - min_lr) * (1 + cos(pi * p)) / 2
//           with p = (step - warmup) / max(1, total - warmup).
double lr_at(const io::LrScheduleSpec& s, double lr, int64_t step, int64_t total);

}  // namespace braid::exec
