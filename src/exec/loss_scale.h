// Dynamic loss scaling for fp16 mixed precision (`train.precision: f16` on a GPU; torch.cuda.amp.GradScaler's
// rule and defaults): the loss's gradient seed is multiplied by the scale S so that small gradients survive the
// cast of GEMM operands to fp16; the gradients are divided by S before clipping and the update. A step whose
// gradients hold an inf or NaN (an fp16 overflow) is skipped: no update, S halves. After kGrowthInterval steps
// in a row without one, S doubles. The state travels in checkpoints (/optimizer attributes loss_scale and
// loss_scale_growth_tracker), so a resumed run continues with the same scale.
#pragma once
#include <cstdint>

namespace braid::exec {

struct LossScaleState {
  double scale = 0;            // 0: no loss scaling (every precision but f16)
  int64_t growth_tracker = 0;  // steps in a row without an overflow since the scale last changed
};

class LossScaler {
 public:
  static constexpr double kInitScale = 65536.0;  // 2^16
  static constexpr double kGrowth = 2.0, kBackoff = 0.5;
  static constexpr int64_t kGrowthInterval = 2000;

  // A state with scale 0 (never scaled before: a fresh run) starts at kInitScale.
  explicit LossScaler(LossScaleState s = {}) : s_(s) {
    if (!(s_.scale > 0)) s_ = LossScaleState{kInitScale, 0};
  }
  double scale() const { return s_.scale; }
  const LossScaleState& state() const { return s_; }
  // After a step's backward: `finite` when every unscaled gradient is finite. Returns whether to take the
  // optimizer step (false: skip it, an overflow).
  bool update(bool finite) {
    if (!finite) {
      s_.scale *= kBackoff;
      s_.growth_tracker = 0;
      return false;
    }
    if (++s_.growth_tracker == kGrowthInterval) {
      s_.scale *= kGrowth;
      s_.growth_tracker = 0;
    }
    return true;
  }

 private:
  LossScaleState s_;
};

}  // namespace braid::exec
