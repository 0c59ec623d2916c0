// Training on accelerator devices (`devices: cuda`, `cuda:N`): the step engine a backend library plugs into the
// trainer. The trainer keeps the loop (data order, learning-rate schedule, checkpoints, evaluation schedule,
// metrics, signals); the engine owns the device copies of the parameters, gradients and optimizer state and
// runs each step on the device. braid_exec cannot depend on a backend (the CUDA library depends on it), so the
// backend registers a factory by device kind (the braid binary's main does, in CUDA builds); a kind nobody
// registered is a user error naming the build.
#pragma once
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "exec/comm/comm.h"
#include "exec/optimizer.h"
#include "exec/param_store.h"
#include "graph/ir.h"
#include "io/dataset.h"
#include "io/run_config.h"
#include "io/trace.h"
#include "planner/plan.h"

namespace braid::exec {

class DeviceEngine {
 public:
  virtual ~DeviceEngine() = default;
  // One optimizer step: forward and backward over the micro-batches of `micro` samples of batch_idx (gradients
  // averaged over them as the CPU trainer does), gradient-norm clipping when clip > 0, the update at lr.
  // Returns the mean loss; *grad_norm is the norm before clipping (-1 without clipping).
  virtual double step(io::Dataset& data, std::span<const int64_t> batch_idx, int64_t step, double lr, double clip,
                      double* grad_norm) = 0;
  // Device -> host (whole tensors: parameters, buffers, optimizer state and step count), for checkpoints,
  // evaluation on the host and the final weights; host -> device after loading weights or a checkpoint.
  virtual void to_host(ParamStore& store, Optimizer* opt) = 0;
  virtual void from_host(const ParamStore& store, const Optimizer* opt) = 0;
  // Loss and metrics (the model's, in graph order) of the samples `idx` of `data`, with the current parameters.
  virtual std::vector<std::pair<std::string, double>> evaluate(io::Dataset& data, std::span<const int64_t> idx) = 0;
  virtual void set_trace(io::TraceLane* lane) = 0;
  // Waits for the device's queued work (step() returns once the update is queued; timing waits here).
  virtual void synchronize() = 0;
  // The device's dense peak in FLOP/s for MFU reports (bf16 tensor cores; 0 when unknown).
  virtual double peak_flops() const = 0;
  virtual std::string describe() const = 0;  // for the trainer's banner: "cuda:0 (NVIDIA H200), bf16 autocast"
  // `braid time`: from now on, every node's run is waited for and its seconds added to node_seconds[node index of
  // the training graph]; nullptr stops. Returns false where the engine cannot (then nothing changes).
  virtual bool set_node_timing(double* /*node_seconds*/) { return false; }
  // Figures of the training so far for the metrics file's step records (fp16: loss_scale, skipped_steps).
  virtual std::vector<std::pair<std::string, double>> step_metrics() const { return {}; }
  virtual size_t device_bytes() const = 0;
  // Whether `flag` is true in any process of the job (every process calls it, between steps); one process: flag.
  virtual bool any(bool flag) { return flag; }
};

struct DeviceEngineArgs {
  const io::RunConfig& cfg;
  std::vector<int> devices;     // the run's device ids of this kind
  const graph::Graph& train;    // the training graph (with backward) of one replica: micro / devices samples
  ParamStore& store;            // created and initialised; the engine uploads it
  int64_t micro = 0;            // samples per micro-batch
  const planner::Plan* plan = nullptr;  // a plan file's plan over the devices (null: one replica per device)
  // A job of several processes (braid launch; with a plan only): the job's world and this process's rank, which is
  // its plan device. Its collectives (to_host, any) are called by every process at the same points.
  Communicator* world = nullptr;
  int rank = 0;
};
using DeviceEngineFactory = std::unique_ptr<DeviceEngine> (*)(const DeviceEngineArgs&);

void register_device_engine(const std::string& kind, DeviceEngineFactory factory);
// The registered factory of `kind`, or nullptr. A kind nobody registered is looked for as a backend module
// first (backend_module_path): loaded once, it registers its engine. *why_not (when given) says why none.
DeviceEngineFactory device_engine(const std::string& kind, std::string* why_not = nullptr);

// Backends as modules loaded at run time (dlopen), so that a CUDA build of braid starts, and runs every CPU
// command, without mapping cuBLAS, cuDNN or NCCL, even on a machine that has none of them. The module of kind
// K is libbraid_K.so beside the braid binary (BRAID_K_MODULE in the environment, with K in capitals, names
// another file). It resolves braid's own functions from the binary that loads it (ENABLE_EXPORTS) and exports
// `extern "C" int braid_backend_init(int abi)`, which registers its engine and returns 0; kBackendAbi changes
// whenever the engine interface does, and a module of another ABI is refused.
constexpr int kBackendAbi = 1;
std::string backend_module_path(const std::string& kind);
// Whether kind's module file exists (for `braid --version`; nothing is loaded).
bool backend_module_present(const std::string& kind);

// The run's devices when they are accelerators (`cuda`, `cuda:N`): true and *dev; false for cpu devices and
// cluster files.
bool accelerator_devices(const io::RunConfig& cfg, planner::DeviceSpec* dev);
// train() and bench() on accelerator devices: the training graph with backward of one data-parallel replica's
// share of a micro-batch (micro / dev.count samples; all of it on one device) into *g (no CPU executor: its arena
// would hold every activation of a model sized for a GPU), its parameters created in `store` from the run's seed,
// and the engine registered for dev.kind, which runs one replica per listed device (a device listed twice holds
// two). With `plan` (a plan file's or the planner's: run_plan) the engine runs the plan's stages on the listed
// devices and *g is the whole model's graph for one replica's micro-batch (plan.summary.micro_batch samples); in a
// job of several processes (`multi`: `world`, `rank`) this process runs plan device `rank`. UserError (exit
// status 2) for a build without the backend, a micro-batch the devices do not divide, or a job of several
// processes without a plan.
// The dtype of the values between ops in the graphs of a GPU run without a plan (graph::BuildOptions::half):
// bf16 under precision bf16, f32 otherwise. BRAID_BF16_VALUES=0 in the environment keeps f32 values with
// GEMM-level autocast (A/B runs). fp16 runs keep f32 values; plans over GPUs (lowered graphs) do too.
DType device_value_dtype(const io::RunConfig& cfg, bool plan);

std::unique_ptr<DeviceEngine> make_device_engine(const io::RunConfig& cfg, const planner::DeviceSpec& dev, int64_t micro,
                                                 bool multi, graph::Graph* g, ParamStore& store,
                                                 const planner::Plan* plan = nullptr, Communicator* world = nullptr,
                                                 int rank = 0);

}  // namespace braid::exec
