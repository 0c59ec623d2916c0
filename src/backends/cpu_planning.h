// What setting a run up asks of cpu devices (exec/backend.h's run-setup block): the calibrated cost model where a
// profile is cached (else the analytic one), every ZeRO stage, f32 throughout, interchangeable devices. The CPU
// backend (src/backends/cpu) derives from it, as the CUDA backend from CudaPlanning (cuda_planning.h).
#pragma once
#include <memory>
#include <string>

#include "exec/backend.h"

namespace braid::exec {

class CpuPlanning : public Backend {
 public:
  std::unique_ptr<planner::CostModel> cost_model(const io::RunConfig& cfg, int count,
                                                 std::string* description) const override;
  int max_zero_stage() const override { return 3; }
  bool mixed_precision() const override { return false; }
  DType value_dtype(const io::RunConfig&, bool) const override { return DType::f32; }
  bool numbered_devices() const override { return false; }
  bool accelerator() const override { return false; }
};

}  // namespace braid::exec
