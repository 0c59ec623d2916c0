// The registry of device engines by device kind (device_engine.h).
#include "exec/device_engine.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <map>
#include <mutex>

#include "graph/build.h"
#include "graph/verify.h"

namespace braid::exec {
namespace {

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}

std::map<std::string, DeviceEngineFactory>& registry() {
  static std::map<std::string, DeviceEngineFactory> r;
  return r;
}

}  // namespace

void register_device_engine(const std::string& kind, DeviceEngineFactory factory) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry()[kind] = factory;
}

DeviceEngineFactory device_engine(const std::string& kind) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto it = registry().find(kind);
  return it == registry().end() ? nullptr : it->second;
}

bool accelerator_devices(const io::RunConfig& cfg, planner::DeviceSpec* dev) {
  std::string err;
  return planner::parse_devices(cfg.devices, dev, &err) && dev->kind != "cpu";
}

DType device_value_dtype(const io::RunConfig& cfg, bool plan) {
  const char* env = std::getenv("BRAID_BF16_VALUES");
  const bool off = env != nullptr && std::string(env) == "0";
  return cfg.train.precision == "bf16" && !plan && !off ? DType::bf16 : DType::f32;
}

std::unique_ptr<DeviceEngine> make_device_engine(const io::RunConfig& cfg, const planner::DeviceSpec& dev, int64_t micro,
                                                 bool multi, graph::Graph* g, ParamStore& store, const planner::Plan* plan,
                                                 Communicator* world, int rank) {
  const SourceLoc at{cfg.path, 0, 0};
  DeviceEngineFactory factory = device_engine(dev.kind);
  if (!factory)
    throw UserError(at, "devices " + cfg.devices + ": this braid was built without the " + dev.kind + " backend",
                    "configure with -DBRAID_WITH_CUDA=ON where the CUDA toolkit, cuDNN and NCCL are installed "
                    "(README, \"Building by hand\"), or train on cpu");
  if (!plan && dev.count > 1 && micro % dev.count != 0)
    throw UserError(at,
                    "devices " + cfg.devices + ": the micro-batch of " + std::to_string(micro) +
                        " samples does not split evenly over " + std::to_string(dev.count) + " data-parallel GPUs",
                    "make train.micro_batch (or train.batch) a multiple of " + std::to_string(dev.count));
  if (multi && !plan)
    throw UserError(at, "devices " + cfg.devices + ": a job of several processes on GPUs needs a plan over one device "
                        "per process",
                    "list one GPU per process (devices: cuda:0-3 for 4 processes; parallel.plan auto plans it), or "
                    "start one process (without braid launch): it drives every listed GPU");
  graph::BuildOptions bo;
  bo.with_backward = true;
  bo.half = device_value_dtype(cfg, plan != nullptr);
  // One replica's share of a micro-batch; under a plan, the whole model for one replica's micro-batch.
  *g = graph::build_graph(cfg.model, plan ? plan->summary.micro_batch : micro / std::max(dev.count, 1), bo);
  graph::verify(*g);
  store.create(*g, cfg.train.seed);
  return factory(DeviceEngineArgs{cfg, dev.ids, *g, store, micro, plan, multi ? world : nullptr, rank});
}

}  // namespace braid::exec
