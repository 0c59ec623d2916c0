// The run-setup answers of cpu devices (cpu_planning.h).
#include "backends/cpu_planning.h"

#include "exec/calibrate.h"

namespace braid::exec {

std::unique_ptr<planner::CostModel> CpuPlanning::cost_model(const io::RunConfig&, int count,
                                                            std::string* description) const {
  CpuModel cm = cpu_cost_model(count);
  *description = cm.description;
  return std::move(cm.model);
}

}  // namespace braid::exec
