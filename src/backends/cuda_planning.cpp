// The run-setup answers of cuda devices (cuda_planning.h), and their stand-in for when the module is not loaded.
#include "backends/cuda_planning.h"

#include "exec/run_setup.h"

namespace braid::exec {

std::unique_ptr<planner::CostModel> CudaPlanning::cost_model(const io::RunConfig& cfg, int count,
                                                             std::string* description) const {
  return gpu_cost_model(cfg, count, description);
}

// ZeRO on cuda devices is written and compiled but its gpu tests have not run yet: plan: auto does not choose it
// there until they have (a plan file may pin it; docs/gpu.md).
int CudaPlanning::max_zero_stage() const { return 0; }

DType CudaPlanning::value_dtype(const io::RunConfig& cfg, bool split) const { return device_value_dtype(cfg, split); }

namespace {

class CudaStandIn final : public CudaPlanning {
 public:
  std::string name() const override { return "cuda"; }
  // The kernel table is the module's: preflight asks the loaded backend (exec::backend), never the stand-in.
  bool supports(const ops::OpDef&, DType) const override { return true; }
  void check_devices(const io::RunConfig&, const std::vector<int>&) const override { refuse(); }
  std::unique_ptr<Device> device(const io::RunConfig&, int) override { refuse(); }
  std::vector<std::unique_ptr<Communicator>> worlds(const WorldSpec&) override { refuse(); }
  bool pins_threads() const override { return false; }
  bool host_memory() const override { return false; }
  double peak_flops(const std::vector<int>&) const override { return 0; }
  std::string describe(const io::RunConfig& cfg, const std::vector<int>&) const override { return cfg.devices; }
  bool overlapped_comm() const override { return false; }

 private:
  [[noreturn]] static void refuse() { BRAID_ASSERT(false, "the cuda planning stand-in runs nothing (exec::backend loads the module)"); __builtin_unreachable(); }
};

}  // namespace

std::unique_ptr<Backend> make_cuda_planning_stand_in() { return std::make_unique<CudaStandIn>(); }

}  // namespace braid::exec
