// The device-backend interface: what the one engine (exec/engine.h) needs of a kind of device, in the spirit of
// ggml's backend vtable. A backend makes devices; a device compiles stage programs (a graph with its executor, its
// gradients, their accumulation over micro-batches and their data-parallel buckets: the Program's), keeps its
// shards' update (clipping's sum of squares and scaling, the optimizer), and copies them to and from the engine's
// host copies. The engine drives the rest once for every backend: the schedule, each full bucket's all-reduce on the
// device's communication thread while backward goes on, the global norm, loss scaling, gather/scatter for
// checkpoints, tracing, timing. The "run setup" block at the end of Backend answers what setting a run up asks.
//
// Backends: "cpu" (src/backends/cpu, built into braid) and "cuda" (src/backends/cuda, the module libbraid_cuda.so
// that braid loads at run time only for cuda devices: no CUDA library is mapped otherwise). Adding one is a module
// that registers itself from braid_backend_init (backend_module_path); nothing in exec/ changes.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "exec/comm/comm.h"
#include "exec/lower.h"
#include "backends/cpu/optimizer.h"
#include "exec/param_store.h"
#include "io/dataset.h"
#include "io/run_config.h"
#include "io/trace.h"
#include "planner/cost_model.h"

namespace braid::exec {

class CommQueue;  // exec/node_loop.h

// What distinguishes one run of a program from another: dropout masks and other draws are a function of these.
struct RunIds {
  uint64_t seed = 0;
  uint64_t stream = 0;       // step * micro_batches + micro-batch
  int64_t batch_offset = 0;  // the replica's first sample in the whole micro-batch
  bool training = true;      // false: evaluation (dropout off, running statistics read, not updated)
};

// Where the time of a step went on the device that is timed (`braid time`), seconds, added to.
struct PhaseTimes {
  double data_s = 0, graph_s = 0, accumulate_s = 0, optimizer_s = 0;
};

// A stage program on one device. Gradients: each backward adds its micro-batch's gradients, scaled 1/M (and under
// loss scaling divided by the scale), to the step's; the update reads them.
class Program {
 public:
  virtual ~Program() = default;
  // The host tensor the dataset fills with model input `name` before forward (the executor's arena view on a CPU,
  // a staging tensor copied to the device on an accelerator).
  virtual Tensor input(const std::string& name, int slot) = 0;
  // Value v in device memory, for sends and receives.
  virtual Tensor value(ValueId v, int slot) = 0;
  // Parameter or buffer `name` of the program in device memory (optimizer-state sharding broadcasts it).
  virtual Tensor param(const std::string& name) = 0;
  // Parameters were written in device memory by someone other than the program and its device's update (ZeRO's
  // broadcast after the update): what the program derives from them (16-bit copies under autocast) is stale.
  virtual void params_changed() {}
  // The first element of value v, on the host (the loss).
  virtual double scalar(ValueId v, int slot) = 0;
  // The communicators of the program's comm_* nodes.
  virtual void set_groups(Communicator* tensor, Communicator* data) = 0;
  // ZeRO-3's parameter gathers on the device's communication thread (`queue`), over `gather` (a data-group
  // communicator of its own), each prefetched while the nodes before it run (NodeLoop::set_gather_prefetch). Only
  // called where the backend overlaps communication (Backend::overlapped_comm); otherwise they run inline.
  virtual void set_gather_prefetch(Communicator* /*gather*/, CommQueue* /*queue*/) {}
  virtual void forward(int slot, const RunIds& ids) = 0;
  // Backward of the step's k-th micro-batch (of M). On the last (k == M - 1), ready(i) is called for gradient i as
  // soon as it is final and in its bucket (the CPU: right after the node that produces it, so that a full bucket's
  // all-reduce overlaps the rest of backward; an accelerator: at the end, its stream synchronised).
  virtual void backward(int slot, const RunIds& ids, int k, int M, const std::function<void(size_t)>* ready) = 0;
  // The data-parallel gradient buckets, reduced in place (averaged) by the engine: bucket b is buckets()[b], and
  // gradient i is in bucket_of()[i]. Empty when the program's gradients are not all-reduced.
  virtual const std::vector<Tensor>& buckets() const = 0;
  virtual const std::vector<size_t>& bucket_of() const = 0;
  // Loss scaling (fp16): the loss's gradient seed is s instead of 1 from the next run on.
  virtual void set_loss_scale(double s) = 0;
  virtual void set_trace(io::TraceLane* lane) = 0;
  virtual void set_trace_micro_batch(int mb) = 0;
  // `braid time`: each node's seconds added to node_seconds[node], and gradient accumulation's to
  // phases->accumulate_s (nullptr: off). False where it cannot.
  virtual bool set_node_timing(double* node_seconds, PhaseTimes* phases) = 0;
  // Node pairs run as one kernel, by the first node's index (`braid time` names the layer it is fused into).
  virtual std::vector<size_t> fused() const { return {}; }
  virtual int slots() const = 0;
  // Bytes of the program's static memory: arena (shared region and slots) and kernel workspace.
  virtual size_t arena_bytes() const = 0;
  virtual size_t workspace_bytes() const = 0;
};

// How the engine asks a device to compile a stage program.
struct ProgramSpec {
  const StageProgram* prog = nullptr;
  int replica = 0, tensor_rank = 0;
  int slots = 1;              // micro-batches in flight between forward and backward
  int micro_batches = 1;      // backward runs a step
  int64_t micro = 1;          // samples of the program's micro-batch
  size_t bucket_bytes = 0;    // data-parallel gradient bucket size (dp > 1)
  bool fuse = true;           // kernel fusions (off for calibration)
  // ZeRO stage 2 and up: the replica that keeps each trainable parameter's gradient (and updates it). Every
  // gradient is then reduced to its owner over the data group right after the node that makes it, in every
  // micro-batch's backward; the others hold none of it past that node. nullptr: every replica keeps every gradient.
  const std::map<std::string, int>* grad_owner = nullptr;
  // ZeRO stage 1 and up: the replica that keeps each trainable parameter's optimizer state and updates it (the
  // engine broadcasts it to the others after the update). nullptr: every replica updates every parameter.
  const std::map<std::string, int>* state_owner = nullptr;
  // ZeRO stage 3: grad_owner's replica also holds the parameter; the others have none of its bytes in the store
  // (the program's comm_gather_param nodes broadcast it from its holder just before use).
  bool params_sharded = false;
};

// What a device holds, in bytes: its programs' static arenas (activations, temporaries, slots, workspace) and its
// shards' parameters and buffers, gradients and optimizer state (an accelerator: in device memory, accumulators
// counted with the gradients).
struct DeviceMemory {
  size_t arena = 0, parameters = 0, gradients = 0, optimizer = 0;
  size_t total() const { return arena + parameters + gradients + optimizer; }
};

// A device of a backend: its stage programs and the update of its shards. `store` is the engine's host copy of the
// device's shards (created and initialised before compile); `opt` the host optimizer over it. On a CPU they are
// the device's memory; an accelerator uploads from them and downloads into them.
class Device {
 public:
  virtual ~Device() = default;
  // Called first on the device's worker thread: placement on `place` of `places` shares of the cores with
  // `threads` threads (a CPU), the current device (CUDA).
  virtual void enter_thread(int place, int places, int threads) = 0;
  virtual std::unique_ptr<Program> compile(const ProgramSpec& spec, ParamStore& store) = 0;
  // After every program: the device's update state over `store` (host copy `opt`).
  virtual void prepare(ParamStore& store, Optimizer& opt, const io::OptimizerSpec& spec) = 0;
  // The sum of squares of the gradients that count in the global norm (a replicated shard counts on one device).
  virtual double grad_sum_squares() = 0;
  virtual void scale_grads(double k) = 0;
  virtual void update(double lr) = 0;
  // Device -> host (values, buffers and, with opt, optimizer state and steps) and host -> device.
  virtual void download(bool with_optimizer) = 0;
  virtual void upload(bool with_optimizer) = 0;
  virtual size_t device_bytes() const = 0;
  virtual DeviceMemory memory() const = 0;
  // Waits for the device's queued work.
  virtual void synchronize() {}
  // v summed over `world` in rank order (the step's loss and squared norm), through device memory where the
  // world's communicator needs it.
  virtual void all_reduce_sum(Communicator& world, std::span<double> v) = 0;
};

// Evaluation of the whole model (loss and metrics) on one device, with the host store's parameters: one for every
// backend, a forward-only program its Device compiles (exec/evaluator.h).
class Evaluator {
 public:
  virtual ~Evaluator() = default;
  // `version` identifies the training state (the optimizer's steps): an accelerator uploads the host store's
  // parameters again when it changed.
  virtual std::vector<std::pair<std::string, double>> run(io::Dataset& data, std::span<const int64_t> idx,
                                                          int64_t version) = 0;
};

// How the engine asks a backend for the job's world communicators.
struct WorldSpec {
  int size = 1;                    // plan devices
  std::vector<int> local;          // the plan devices of this process
  std::vector<int> where;          // the backend device of every plan device (size entries)
  Communicator* host = nullptr;    // a job of several processes: its world (TCP), one local device; else null
  int max_messages = 2;            // messages in flight per peer (pipelines: micro-batches + 1)
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Whether the backend runs op `op` on values of dtype `values` (its kernel table: found from the OpDef, never
  // from the op's name). `braid check`, `braid plan` and preflight ask it of every node before anything runs
  // (check_supported, exec/preflight.h).
  virtual bool supports(const ops::OpDef& op, DType values) const = 0;
  // Errors (UserError at the run file) for devices that are not there, before anything is built.
  virtual void check_devices(const io::RunConfig& cfg, const std::vector<int>& where) const = 0;
  // `where`: the backend's device (a GPU's number; 0 on a CPU). Several plan devices may share one.
  virtual std::unique_ptr<Device> device(const io::RunConfig& cfg, int where) = 0;
  // The world communicator of every local plan device (in spec.local order).
  virtual std::vector<std::unique_ptr<Communicator>> worlds(const WorldSpec& spec) = 0;
  // Whether the engine pins device threads to shares of this process's cores (CPU devices in one process).
  virtual bool pins_threads() const = 0;
  // Whether device memory is the host's (a device's store is its parameters themselves, not a copy).
  virtual bool host_memory() const = 0;
  // Dense peak FLOP/s of the listed devices together, for MFU (0: unknown).
  virtual double peak_flops(const std::vector<int>& where) const = 0;
  // "NVIDIA H200, bf16 autocast": for the trainer's banner.
  virtual std::string describe(const io::RunConfig& cfg, const std::vector<int>& where) const = 0;
  // Whether collectives may run on a thread of their own while the device computes (a CPU): the data-parallel
  // gradient all-reduce of each bucket as soon as backward has filled it, and ZeRO-3's prefetched parameter gathers.
  // Otherwise (NCCL: two communicators' kernels in flight at once on one GPU may wait on each other) the device's
  // worker thread all-reduces its buckets at the schedule's AllReduceGrads and gathers each parameter inline.
  virtual bool overlapped_comm() const = 0;
  // Whether the run uses dynamic loss scaling (fp16 autocast).
  virtual bool loss_scaling(const io::RunConfig& /*cfg*/) const { return false; }

  // ---- run setup (issue 38 item 3) ----
  // What setting a run up asks of its kind of device (exec/run_setup.h: RunSetup), so that exec/ names no kind. A
  // kind whose module is not loaded answers these through its planning stand-in (backends/builtin.h).
  // The cost model plan: auto searches on and a plan file's step is predicted on, for `count` devices; *description
  // names it for the banner.
  virtual std::unique_ptr<planner::CostModel> cost_model(const io::RunConfig& cfg, int count,
                                                         std::string* description) const = 0;
  // The highest ZeRO stage plan: auto may choose on these devices (a plan file may pin any).
  virtual int max_zero_stage() const = 0;
  // Whether train.precision bf16 / f16 trains mixed here (autocast, the planner's 16-bit peak); else f32, with a warning.
  virtual bool mixed_precision() const = 0;
  // The dtype of the values between ops in a plan's training and evaluation graphs (`split`: several stages or
  // tensor parallelism): graph::BuildOptions::half.
  virtual DType value_dtype(const io::RunConfig& cfg, bool split) const = 0;
  // Whether the numbers of a device list name this backend's devices (cuda:0,2: GPUs 0 and 2, plan device i on the
  // i-th listed); false: interchangeable devices (cpu:4), every plan device on backend device 0.
  virtual bool numbered_devices() const = 0;
  // Devices beside the host whose plans are predicted from datasheets: the banner names them (describe) instead
  // of the plan's layout, and the closed loop (measured against predicted step) does not run.
  virtual bool accelerator() const = 0;
};

// The backend of a device kind: "cpu" is built in; another kind is loaded as a module (backend_module_path) the
// first time it is asked for. nullptr, and *why_not says why, when there is none.
Backend* backend(const std::string& kind, std::string* why_not = nullptr);
void register_backend(const std::string& kind, std::unique_ptr<Backend> b);
// The backends built into braid by kind (cpu; nullptr for others): src/backends/builtin.cpp, with planning_backend
// (src/backends/builtin.h), the run-setup answers of a kind without loading its module.
std::unique_ptr<Backend> make_builtin_backend(const std::string& kind);

// Backends as modules loaded at run time (dlopen), so that a CUDA build of braid starts, and runs every CPU
// command, without mapping cuBLAS, cuDNN or NCCL, even on a machine that has none of them. The module of kind K is
// libbraid_K.so beside the braid binary (BRAID_K_MODULE in the environment, with K in capitals, names another
// file). It resolves braid's own functions from the binary that loads it (ENABLE_EXPORTS) and exports
// `extern "C" int braid_backend_init(int abi)`, which registers its backend and returns 0; kBackendAbi changes
// whenever this interface does, and a module of another ABI is refused.
constexpr int kBackendAbi = 5;
std::string backend_module_path(const std::string& kind);
// Whether kind's module file exists (for `braid --version`; nothing is loaded).
bool backend_module_present(const std::string& kind);

}  // namespace braid::exec
