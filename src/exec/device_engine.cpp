// The registry of device engines by device kind (device_engine.h).
#include "exec/device_engine.h"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
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

std::string backend_module_path(const std::string& kind) {
  std::string var = "BRAID_" + kind + "_MODULE";
  std::transform(var.begin(), var.end(), var.begin(), [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  if (const char* env = std::getenv(var.c_str()); env && *env) return env;
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::string dir = ec ? std::string(".") : exe.parent_path().string();
  return dir + "/libbraid_" + kind + ".so";
}

bool backend_module_present(const std::string& kind) {
  std::error_code ec;
  return std::filesystem::is_regular_file(backend_module_path(kind), ec);
}

namespace {

// Loads kind's module once (the handle is kept for the life of the process); "" when its engine registered.
std::string load_backend_module(const std::string& kind) {
  static std::mutex m;
  static std::map<std::string, std::string> tried;  // kind -> the outcome of its one attempt
  std::lock_guard<std::mutex> lock(m);
  if (auto it = tried.find(kind); it != tried.end()) return it->second;
  std::string& why = tried[kind];
  const std::string path = backend_module_path(kind);
  if (!backend_module_present(kind)) {
    why = "this braid has no " + kind + " backend (no module " + path + ")";
    return why;
  }
  void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = ::dlerror();
    why = "cannot load the " + kind + " backend " + path + ": " + (e ? e : "unknown error");
    return why;
  }
  using Init = int (*)(int);
  auto init = reinterpret_cast<Init>(::dlsym(h, "braid_backend_init"));
  if (!init) {
    why = path + " is not a braid backend module (no braid_backend_init)";
    return why;
  }
  if (int rc = init(kBackendAbi); rc != 0) {
    why = path + " is a backend module of another braid (interface " + std::to_string(rc) + ", this braid's " +
          std::to_string(kBackendAbi) + ")";
    return why;
  }
  return why;  // "": registered
}

}  // namespace

DeviceEngineFactory device_engine(const std::string& kind, std::string* why_not) {
  {
    std::lock_guard<std::mutex> lock(registry_mutex());
    auto it = registry().find(kind);
    if (it != registry().end()) return it->second;
  }
  std::string why = load_backend_module(kind);
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto it = registry().find(kind);
  if (it != registry().end()) return it->second;
  if (why_not) *why_not = why.empty() ? "the " + kind + " module registered no engine" : why;
  return nullptr;
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
  std::string why_not;
  DeviceEngineFactory factory = device_engine(dev.kind, &why_not);
  if (!factory) {
    const bool built = backend_module_present(dev.kind);
    throw UserError(at, "devices " + cfg.devices + ": " + why_not,
                    built ? "install the CUDA runtime, cuBLAS, cuDNN and NCCL this braid was built with (or put "
                            "them on LD_LIBRARY_PATH), or train on cpu"
                          : "configure with -DBRAID_WITH_CUDA=ON where the CUDA toolkit, cuDNN and NCCL are "
                            "installed (README, \"Building by hand\"), or train on cpu");
  }
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
