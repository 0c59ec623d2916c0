// The one engine: every training step braid runs, on any backend (exec/backend.h). A run is a plan (a plan
// file's, the planner's, or the trivial ones: planner::single_device_plan for `cpu` / `cuda:0`, data parallel over
// every listed device for `cpu:N` / `cuda:0-3` when there is no plan), lowered to one program per stage
// (exec/lower.h), and run by one worker thread per device of this process. Every device executes the instruction
// list its pipeline position gets from the plan's schedule (schedule.h: GPipe, 1F1B or interleaved 1F1B, checked
// free of deadlock before anything runs), for each stage it holds: Forward / Backward run the stage program on one
// micro-batch slot, sends and receives move boundary values between stage groups over the world communicator,
// the data-parallel gradient buckets are all-reduced (averaged) by the device's communication thread as soon as
// backward has filled them (it also runs ZeRO-3's parameter gathers, each prefetched while the nodes before it
// run), and after the list every device clips (with the global norm, summed over the world)
// and updates its own shards. fp16 runs scale the loss dynamically (exec/loss_scale.h), here for every backend.
// Invariants: a device holds only its stage programs' parameters, on its own shards, with their optimizer state;
// gather()/scatter() convert to and from whole tensors (checkpoints, evaluation), so a checkpoint written under
// one plan loads under any other. Only the world communicator connects devices: between processes it is the
// job's (TCP, NCCL) and nothing else changes.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "exec/backend.h"
#include "exec/loss_scale.h"
#include "exec/lower.h"
#include "exec/node_loop.h"
#include "backends/cpu/optimizer.h"
#include "exec/schedule.h"
#include "io/dataset.h"
#include "io/run_config.h"
#include "io/trace.h"
#include "planner/plan.h"

namespace braid::exec {

struct EngineOptions {
  bool sync_batch_norm = false;            // batch norm statistics over the data-parallel group (LowerOptions)
  size_t bucket_bytes = size_t{25} << 20;  // data-parallel gradient buckets (PyTorch DDP's default)
  bool fuse = true;                        // kernel fusions (calibration turns them off)
  // ZeRO-3's gathers prefetched on the comm thread where the backend overlaps communication (Program::
  // set_gather_prefetch); false, or BRAID_PREFETCH=0 in the environment, runs each inline (A/B runs).
  bool prefetch = true;
  DType half = DType::f32;                 // 16-bit values between ops (LowerOptions::half)
  // Graphs the run's setup built (exec/run_setup.h), outliving the engine; null: built here. `model`: the forward
  // graph at the plan's micro-batch with `half` values, lowered; `eval`: the evaluation graph, for batches of its size.
  const graph::Graph* model = nullptr;
  const graph::Graph* eval = nullptr;
};

// Where the devices of a plan run. In-process (no PlanWorld, the default): every device in this process, the
// backend's world (in-process queues on CPUs, NCCL between GPUs). Between processes (`braid launch`): this process
// runs `local`; `communicator(id)` gives each its world communicator, or, when it is not set, the backend makes
// them over `host` (the job's world: NCCL joined over it on GPUs, the job's world itself on CPUs).
struct PlanWorld {
  std::vector<int> local;
  std::function<std::unique_ptr<Communicator>(int device)> communicator;
  Communicator* host = nullptr;
};

// What one step returns: the global loss (mean over the micro-batches and replicas) and the gradient norm before
// clipping (-1 without clipping).
struct StepResult {
  double loss = 0;
  double grad_norm = -1;
};

// One device's part of the whole model: its shards of stage program `p` at `tensor_rank` (values, and the
// optimizer state when both optimizers are given) from the whole tensors into the device's store and optimizer.
void scatter_stage(const StageProgram& p, int tensor_rank, const ParamStore& full, const Optimizer* full_opt,
                   ParamStore& store, Optimizer* opt);
// Stage program p's shards of every parameter and buffer at `tensor_rank`, drawn whole from the run's seed as one
// device would and sliced, added to `store`.
void add_stage_params(const StageProgram& p, int tensor_rank, uint64_t seed, ParamStore& store);

// A plan device's host copies of its shards, or none (a device of another process).
struct ShardHolder {
  ParamStore* store = nullptr;
  Optimizer* opt = nullptr;
};
// Every shard that counts (replica 0's; tensor rank 0's unless sliced) into the whole tensors, in plan device 0's
// process: `local(id)` gives this process's devices' copies; shards of other processes arrive over `host` (the
// job's world; unused when every device is local). A collective of every process of the job.
// `state_owner(p, name)`: the data-parallel replica holding parameter `name`'s optimizer state (optimizer-state
// sharding; empty: replica 0, whose values are taken unless `values_sharded`: ZeRO-3, the holder's).
using StateOwner = std::function<int(const StageProgram&, const std::string&)>;
void gather_shards(const std::vector<StageProgram>& programs, const std::function<ShardHolder(int)>& local,
                   Communicator* host, ParamStore& full, Optimizer* full_opt, const StateOwner& state_owner = {},
                   bool values_sharded = false);
// ZeRO stage 1's partition of stage program p's trainable parameters over its dp replicas: largest first, each to
// the replica holding the fewest bytes so far (ties: the lower replica); name -> replica. Deterministic.
std::map<std::string, int> zero_owners(const StageProgram& p);

// The trivial plans: one stage on `devices` devices, every layer replicated, each replica running micro / devices
// samples of every micro-batch (devices 1: planner::single_device_plan). UserError at the run file when the
// devices do not divide the micro-batch.
// `fwd`: the model's forward graph at any batch (null: built here). In run_setup.cpp.
planner::Plan data_parallel_plan(const io::RunConfig& cfg, int devices, const graph::Graph* fwd = nullptr);

class Engine {
 public:
  // Lowers `plan` (validated) for `backend`, builds every local device's programs, parameters (initialised from
  // the run's seed as the whole model would be, then sliced) and optimizer, on backend devices `where` (one entry
  // per plan device; empty: 0 for every one). Checks the schedule before returning.
  Engine(const io::RunConfig& cfg, const planner::Plan& plan, Backend& backend, std::vector<int> where = {},
         EngineOptions options = {}, const PlanWorld* world = nullptr);
  // On CPU devices, from a model and optimizer alone (tests, calibration).
  Engine(const io::ModelSpec& m, const io::OptimizerSpec& opt, const planner::Plan& plan, uint64_t seed,
         EngineOptions options = {}, const PlanWorld* world = nullptr);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  int devices() const { return plan_.summary.devices; }  // in the plan; local_devices() run here
  std::vector<int> local_devices() const;
  bool is_local(int device) const { return local_of(device) != nullptr; }
  const planner::Plan& plan() const { return plan_; }
  const Schedule& schedule() const { return schedule_; }
  const std::vector<StageProgram>& programs() const { return programs_; }
  // Micro-batches each stage keeps in flight (its executor's slots), from the schedule.
  const std::vector<int>& stage_slots() const { return stage_slots_; }
  // Per local device: the static arena (shared region + slots x slot region) of all its stage programs, bytes.
  std::vector<size_t> arena_bytes() const;
  // The most any local device holds in device memory (arenas, parameters, gradients, optimizer state).
  size_t device_bytes() const;
  // Per local device (local_devices() order): what it holds (static: the memory plan's arenas, the shards).
  std::vector<DeviceMemory> memory() const;
  size_t workspace_bytes() const;

  // One optimizer step over `batch_idx` (micro_batches x dp x micro_batch samples, in micro-batch order).
  StepResult step(io::Dataset& data, std::span<const int64_t> batch_idx, int64_t step, double lr, double clip);

  // The whole model's host copies when one device holds all of it (a plan of one stage without tensor
  // parallelism nor optimizer-state sharding, on a backend whose device memory is the host's): plan device 0's
  // store and optimizer, so that
  // nothing is copied for checkpoints and evaluation; else null (use gather and scatter).
  ParamStore* whole_store();
  Optimizer* whole_optimizer();
  // Whole tensors from the devices' shards (replica 0's): parameters, buffers, optimizer state and steps.
  // Between processes it is a collective of every process (call it on all of them, workers idle): the
  // whole tensors arrive in the process of device 0; the others' `full` is left as it was.
  void gather(ParamStore& full, Optimizer* full_opt);
  // Every device takes its shards of the whole tensors.
  void scatter(const ParamStore& full, const Optimizer* full_opt);
  // Loss and metrics of the samples `idx` of `data` with the whole model's parameters in `full` (current: after
  // gather), on plan device 0's backend device.
  std::vector<std::pair<std::string, double>> evaluate(ParamStore& full, io::Dataset& data, std::span<const int64_t> idx);
  // `lane` records the device's compute, sends, receives and the step; `comm_lane` (may be null) its
  // gradient all-reduce thread.
  void set_trace(int device, io::TraceLane* lane, io::TraceLane* comm_lane = nullptr);
  // `braid time`: every node's seconds of plan device 0's program added to node_seconds[node] and the step's
  // phases to *phases (nullptr: off). Only for plans of one stage; false where the backend cannot time nodes.
  bool set_node_timing(double* node_seconds, PhaseTimes* phases);
  // Node pairs plan device 0's (first) program runs as one kernel, by the first node's index.
  std::vector<size_t> fused() const;
  // Whether `flag` is true on any process of the job (an all-reduce between steps; every process calls it): so
  // that all stop, checkpoint or evaluate at the same step.
  bool any(bool flag);
  // Per stage program of `device` (stage order): its gradient buckets' sizes in bytes, in all-reduce order.
  std::vector<std::vector<size_t>> bucket_bytes(int device) const;
  // Per plan device (devices() entries, indexed by plan device id): seconds spent in Forward and Backward
  // instructions (its stage programs) since construction; 0 for devices another process runs (is_local).
  // Read between steps (the closed loop compares them with the predicted stage times).
  std::vector<double> busy_seconds() const;
  int micro_batches() const { return micro_batches_; }
  // Waits for every local device's queued work (timing on accelerators).
  void synchronize();
  Backend& backend() const { return backend_; }
  // "cuda:0 (NVIDIA H200), bf16 autocast" / "cpu:4": for banners and bench.
  std::string describe() const;
  double peak_flops() const;
  // Figures of the training so far for the metrics file (fp16: loss_scale, skipped_steps).
  std::vector<std::pair<std::string, double>> step_metrics() const;

 private:
  struct Chunk {  // one stage program on one device
    const StageProgram* prog = nullptr;
    int replica = 0, tensor_rank = 0;
    std::unique_ptr<Program> program;
    std::unique_ptr<Communicator> tensor_comm, data_comm;
    std::unique_ptr<Communicator> bucket_comm;  // the data group, used by the comm thread only
    SlotBook slots;                    // the program's slots by micro-batch, this step
    std::vector<Tensor> model_inputs;  // [slot][model input], model order: the program's inputs or scratch
    size_t num_model_inputs = 0;
    std::unique_ptr<Communicator> gather_comm;  // the data group, for ZeRO-3's prefetched gathers (comm thread)
    std::vector<int> pending;          // per bucket: gradients still to come in this step
    uint64_t last_bucket = 0;          // the comm thread's ticket of the last bucket submitted this step, 0: none
    std::function<void(size_t)> ready;  // a gradient is final: its bucket's count goes down
    int backwards = 0;                 // backward runs of this chunk in the current step
    const std::map<std::string, int>* owner = nullptr;  // zero: 1 with dp > 1: its stage's owners_ entry
  };
  // A device: its chunks, shards, optimizer and threads. As the CommQueue of its programs, its communication
  // thread (gradient buckets, ZeRO-3's gathers).
  struct Dev final : CommQueue {
    uint64_t submit(std::function<void()> job) override;
    void wait(uint64_t ticket) override;
    io::TraceLane* lane() const override { return comm_trace; }
    int id = 0;
    int position = 0;  // pipeline position (schedule device)
    int where = 0;     // the backend's device
    std::unique_ptr<Device> device;
    std::vector<Chunk> chunks;  // by stage order
    ParamStore store;
    std::unique_ptr<Optimizer> opt;
    std::unique_ptr<Communicator> world;
    std::vector<int64_t> scratch;
    StepResult result;
    double sq = 0;  // the last step's squared gradient norm over the world
    std::exception_ptr error;
    io::TraceLane* trace = nullptr;
    io::TraceLane* comm_trace = nullptr;
    // The communication thread: jobs in submission order (the same on every replica), comm_done of comm_submitted
    // run so far (guarded by comm_mu).
    std::thread comm_thread;
    std::mutex comm_mu;
    std::condition_variable comm_cv;
    std::deque<std::function<void()>> comm_queue;
    uint64_t comm_submitted = 0, comm_done = 0;
    bool comm_quit = false;
    std::exception_ptr comm_error;
    double busy_s = 0;  // Forward and Backward wall time
  };
  struct Job {
    io::Dataset* data = nullptr;
    std::span<const int64_t> batch_idx;
    int64_t step = 0;
    double lr = 0, clip = 0, loss_scale = 1;
  };

  void build(const PlanWorld* world);
  void worker(Dev& d, int place, int places, int threads);
  void comm_worker(Dev& d, int place, int places);
  void submit_bucket(Dev& d, Chunk& c, size_t bucket);
  // Whether chunk c's ZeRO-3 gathers run prefetched on the comm thread (Program::set_gather_prefetch).
  bool prefetches(const Chunk& c) const;
  void run_step(Dev& d, const Job& job);
  // A send or receive instruction: boundary `values` of chunk c's slot (invalid: none) to or from stage
  // `peer_stage`, tagged by the boundary after stage `boundary`.
  void move_boundary(Dev& d, Chunk& c, const Instr& in, int peer_stage, int boundary,
                     const std::vector<ValueId>& values, const std::vector<BoundaryValue>& names, bool grads);
  void finish_step(Dev& d, const Job& job, double loss_sum);
  int state_owner(const StageProgram& p, const std::string& name) const;
  Chunk* chunk_of(Dev& d, int stage);
  Dev* local_of(int device) const;
  int device_at(int stage, int replica, int tensor_rank) const;

  io::RunConfig cfg_;
  planner::Plan plan_;
  Backend& backend_;
  std::vector<int> where_;  // per plan device
  EngineOptions options_;
  uint64_t seed_;
  std::vector<StageProgram> programs_;
  std::vector<std::map<std::string, int>> owners_;  // per stage: zero_owners (empty without sharding), made once
  Schedule schedule_;
  std::vector<int> stage_slots_;
  int dp_ = 1, micro_batches_ = 1;
  int64_t micro_ = 1;  // per replica
  Communicator* host_ = nullptr;                 // the job's world between processes, else null
  std::vector<std::unique_ptr<Dev>> devices_;    // the local devices, by id
  std::vector<int> local_index_;                 // per device id: index in devices_, -1 when remote
  std::vector<std::thread> threads_;
  std::unique_ptr<Evaluator> evaluator_;
  int64_t version_ = 0;  // the training state's: steps and scatters so far (evaluation uploads when it moved)
  bool scaling_ = false;  // dynamic loss scaling (fp16)
  LossScaler scaler_;
  int64_t skipped_ = 0;
  double* node_seconds_ = nullptr;
  PhaseTimes* phases_ = nullptr;

  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool quit_ = false;
  Job job_;
  std::exception_ptr first_error_;
};

}  // namespace braid::exec
