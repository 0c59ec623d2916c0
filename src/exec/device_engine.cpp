// The registry of device engines by device kind (device_engine.h).
#include "exec/device_engine.h"

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

std::unique_ptr<DeviceEngine> make_device_engine(const io::RunConfig& cfg, const planner::DeviceSpec& dev, int64_t micro,
                                                 bool multi, graph::Graph* g, ParamStore& store) {
  const SourceLoc at{cfg.path, 0, 0};
  DeviceEngineFactory factory = device_engine(dev.kind);
  if (!factory)
    throw UserError(at, "devices " + cfg.devices + ": this braid was built without the " + dev.kind + " backend",
                    "configure with -DBRAID_WITH_CUDA=ON where the CUDA toolkit, cuDNN and NCCL are installed "
                    "(README, \"Building by hand\"), or train on cpu");
  if (dev.count > 1)
    throw UserError(at, "devices " + cfg.devices + ": braid runs on one GPU in this version; plans over several "
                        "GPUs (data, tensor and pipeline parallel over NCCL) are not wired into the trainer yet",
                    "use devices: " + dev.kind + ":" + std::to_string(dev.ids.empty() ? 0 : dev.ids[0]) + " (docs/gpu.md)");
  if (multi)
    throw UserError(at, "devices " + cfg.devices + ": a job of several processes trains on cpu devices in this version",
                    "start one process (without braid launch) for a single GPU");
  if (cfg.parallel.plan != "auto")
    throw UserError(at, "parallel.plan " + cfg.parallel.plan + ": plan files run on cpu:N devices in this version");
  graph::BuildOptions bo;
  bo.with_backward = true;
  *g = graph::build_graph(cfg.model, micro, bo);
  graph::verify(*g);
  store.create(*g, cfg.train.seed);
  return factory(DeviceEngineArgs{cfg, dev.ids, *g, store, micro});
}

}  // namespace braid::exec
