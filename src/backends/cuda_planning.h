// What setting a run up asks of cuda devices (exec/backend.h's run-setup block), built into braid in every build so
// that planning a cuda run (braid plan, braid check, plan: auto, the tests) needs neither the module nor a GPU. The
// CUDA backend (src/backends/cuda, the module) derives from it; a stand-in answers for it while the module is not
// loaded (exec::planning_backend). Nothing here touches CUDA.
#pragma once
#include <memory>
#include <string>

#include "exec/backend.h"

namespace braid::exec {

class CudaPlanning : public Backend {
 public:
  std::unique_ptr<planner::CostModel> cost_model(const io::RunConfig& cfg, int count,
                                                 std::string* description) const override;
  int max_zero_stage() const override;
  bool mixed_precision() const override { return true; }
  DType value_dtype(const io::RunConfig& cfg, bool split) const override;
  bool numbered_devices() const override { return true; }
  bool accelerator() const override { return true; }
};

// The stand-in for planning_backend("cuda"): the answers above; its devices and worlds assert.
std::unique_ptr<Backend> make_cuda_planning_stand_in();

}  // namespace braid::exec
