// Runs a lowered plan (lower.h) on `cpu:N`: N logical devices in one process, one worker thread each.
// Every device executes the instruction list that its pipeline position gets from the plan's schedule
// (schedule.h: GPipe, 1F1B or interleaved 1F1B, checked free of deadlock before anything runs), for each
// stage it holds: Forward / Backward run the stage program's executor on one micro-batch slot, sends and
// receives move boundary values between stage groups over the world communicator, AllReduceGrads averages
// the stage's parameter gradients over its data-parallel group, and after the list every device clips
// (with the global norm, all-reduced over the world) and steps its own shard of the parameters.
// Invariants: a device holds only its stage programs' parameters, on its own shards, with their optimizer
// state; gather()/scatter() convert to and from whole tensors (checkpoints, evaluation), so a checkpoint
// written under one plan loads under any other. Only the world Communicator connects devices: an
// implementation between processes fits unchanged.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "exec/comm/inproc.h"
#include "exec/data_parallel.h"
#include "exec/executor.h"
#include "exec/lower.h"
#include "exec/optimizer.h"
#include "exec/schedule.h"
#include "io/dataset.h"
#include "io/run_config.h"
#include "io/trace.h"
#include "planner/plan.h"

namespace braid::exec {

struct PlanRunnerOptions {
  bool sync_batch_norm = false;  // batch norm statistics over the data-parallel group (LowerOptions)
  size_t bucket_bytes = size_t{25} << 20;  // data-parallel gradient buckets (PyTorch DDP's default)
};

// Where the devices of a plan run. In-process (the default, `cpu:N`): every device in this process, one
// InProcWorld. Between processes (`braid launch`): this process runs `local` (device ids = world ranks) and
// `communicator(id)` gives each its world communicator (TCP, NCCL); everything else is unchanged.
struct PlanWorld {
  std::vector<int> local;
  std::function<std::unique_ptr<Communicator>(int device)> communicator;
};

// One device's part of the whole model: its shards of stage program `p` at `tensor_rank` (values, and the optimizer
// state when both optimizers are given) from the whole tensors into the device's store and optimizer.
void scatter_stage(const StageProgram& p, int tensor_rank, const ParamStore& full, const Optimizer* full_opt,
                   ParamStore& store, Optimizer* opt);

// Stage program p's shards of every parameter and buffer at `tensor_rank`, drawn whole from the run's seed as one
// device would and sliced, added to `store`.
void add_stage_params(const StageProgram& p, int tensor_rank, uint64_t seed, ParamStore& store);
// The dataset's views for one stage executor of `slots` slots: every model input in model order, slot by slot; the
// ones the stage reads from `input(name, slot)` (its executor's), the others scratch of `micro` samples.
std::vector<Tensor> stage_model_inputs(const StageProgram& p, const io::ModelSpec& m, int slots, int64_t micro,
                                       const std::function<Tensor(const std::string&, int)>& input);

// A plan device's host copies of its shards, or none (a device of another process).
struct ShardHolder {
  ParamStore* store = nullptr;
  Optimizer* opt = nullptr;
};
// Every shard that counts (replica 0's; tensor rank 0's unless sliced) into the whole tensors, in plan device 0's
// process: `local(id)` gives this process's devices' copies; shards of other processes arrive over `host` (the
// job's world; unused when every device is local). A collective of every process of the job.
void gather_shards(const std::vector<StageProgram>& programs, const std::function<ShardHolder(int)>& local,
                   Communicator* host, ParamStore& full, Optimizer* full_opt);

class PlanRunner {
 public:
  // Lowers `plan` (validated) and builds every device's programs, parameters (initialised from `seed` as the
  // whole model would be, then sliced) and optimizer. Checks the schedule before returning.
  PlanRunner(const io::ModelSpec& m, const io::OptimizerSpec& opt, const planner::Plan& plan, uint64_t seed,
             PlanRunnerOptions options = {}, const PlanWorld* world = nullptr);
  ~PlanRunner();
  PlanRunner(const PlanRunner&) = delete;
  PlanRunner& operator=(const PlanRunner&) = delete;

  int devices() const { return plan_.summary.devices; }  // in the plan; local_devices() run here
  std::vector<int> local_devices() const;
  bool is_local(int device) const { return local_of(device) != nullptr; }
  const Schedule& schedule() const { return schedule_; }
  const ScheduleCheck& schedule_check() const { return check_; }
  const std::vector<StageProgram>& programs() const { return programs_; }
  // Micro-batches each stage keeps in flight (its executor's slots), from the schedule.
  const std::vector<int>& stage_slots() const { return stage_slots_; }
  // Per device: the static arena (shared region + slots x slot region) of all its stage executors, bytes.
  std::vector<size_t> arena_bytes() const;

  // One optimizer step over `batch_idx` (micro_batches x dp x micro_batch samples, in micro-batch order).
  DpStepResult step(io::Dataset& data, std::span<const int64_t> batch_idx, int64_t step, double lr, double clip);

  // Whole tensors from the devices' shards (replica 0's): parameters, buffers, optimizer state and steps.
  // Between processes it is a collective of every process (call it on all of them, workers idle): the
  // whole tensors arrive in the process of device 0; the others' `full` is left as it was.
  void gather(ParamStore& full, Optimizer* full_opt);
  // Every device takes its shards of the whole tensors.
  void scatter(const ParamStore& full, Optimizer* full_opt);
  // `lane` records the device's compute, sends, receives and the step; `comm_lane` (may be null) its
  // gradient all-reduce thread.
  void set_trace(int device, io::TraceLane* lane, io::TraceLane* comm_lane = nullptr);
  // Whether `flag` is true on any process of the job (a world all-reduce between steps; every process calls
  // it): so that all stop, checkpoint or evaluate at the same step.
  bool any(bool flag);
  // Per chunk of `device` (stage order): its gradient buckets' sizes in bytes, in all-reduce order.
  std::vector<std::vector<size_t>> bucket_bytes(int device) const;
  void set_trace(int device, io::TraceLane* lane);
  // Per plan device (devices() entries, indexed by plan device id): seconds spent in Forward and Backward
  // instructions (its stage executors) since construction; 0 for devices another process runs (is_local).
  // Read between steps (the closed loop compares them with the predicted stage times).
  std::vector<double> busy_seconds() const;
  int micro_batches() const { return micro_batches_; }

 private:
  struct Chunk {  // one stage program on one device
    const StageProgram* prog = nullptr;
    int replica = 0, tensor_rank = 0;
    std::unique_ptr<Executor> exec;
    std::unique_ptr<Communicator> tensor_comm, data_comm;
    SlotBook slots;  // the executor's slots by micro-batch, this step
    std::vector<Tensor> model_inputs;  // [slot][model input], model order: arena views or scratch
    size_t num_model_inputs = 0;
    std::vector<std::pair<ValueId, size_t>> grads;  // gradient value, store entry
    bool grads_in_store = false;  // the executor writes the gradients into the store's tensors (no accumulate)
    // Data-parallel gradient sync overlapped with the step's last backward: grads_at_node[k] lists the
    // gradients node k produces; each fills its bucket, and a full bucket goes to the device's comm thread.
    struct Bucket {
      std::vector<size_t> grads;  // indices into `grads`, in the order backward produces them
      Tensor flat;                // the gradients' memory: they are views into it (undefined for one tensor)
      int pending = 0;            // gradients still to come in this step
    };
    std::vector<std::vector<size_t>> grads_at_node;
    std::vector<Bucket> buckets;
    std::vector<size_t> bucket_of;  // per gradient
    std::unique_ptr<Communicator> bucket_comm;  // the data group, used by the comm thread only
    int outstanding = 0;            // buckets submitted and not yet reduced (guarded by the device's comm_mu)
    // The executor's after-node hook for the step's last backward (made once; reads hook_slot, hook_first).
    std::function<void(size_t)> bucket_hook;
    int hook_slot = 0;
    bool hook_first = false;
    int backwards = 0;              // backward runs of this chunk in the current step
  };
  struct CommJob {
    Chunk* chunk = nullptr;
    size_t bucket = 0;
  };
  struct Device {
    int id = 0;
    int position = 0;  // pipeline position (schedule device)
    std::vector<Chunk> chunks;  // by stage order
    ParamStore store;
    std::unique_ptr<Optimizer> opt;
    std::unique_ptr<Communicator> world;
    std::vector<int64_t> scratch;
    double loss_sum = 0;
    DpStepResult result;
    std::exception_ptr error;
    io::TraceLane* trace = nullptr;
    io::TraceLane* comm_trace = nullptr;
    // The gradient all-reduce thread: buckets in submission order (the same on every replica).
    std::thread comm_thread;
    std::mutex comm_mu;
    std::condition_variable comm_cv;
    std::deque<CommJob> comm_queue;
    bool comm_quit = false;
    std::exception_ptr comm_error;
    double busy_s = 0;  // Forward and Backward wall time
    Tensor sums;        // f64[2]: the loss and squared gradient norm all-reduced at the end of a step
    Tensor flag;        // f64[1]: any()
  };
  struct Job {
    io::Dataset* data = nullptr;
    std::span<const int64_t> batch_idx;
    int64_t step = 0;
    double lr = 0, clip = 0;
  };

  void worker(Device& d);
  void comm_worker(Device& d);
  void submit_bucket(Device& d, Chunk& c, size_t bucket);
  void wait_buckets(Device& d, Chunk& c);
  void run_step(Device& d, const Job& job);
  Chunk* chunk_of(Device& d, int stage);
  Device* local_of(int device) const;
  int device_at(int stage, int replica, int tensor_rank) const;

  planner::Plan plan_;
  uint64_t seed_;
  std::vector<StageProgram> programs_;
  Schedule schedule_;
  ScheduleCheck check_;
  std::vector<int> stage_slots_;
  int dp_ = 1, micro_batches_ = 1;
  int64_t micro_ = 1;  // per replica
  std::unique_ptr<InProcWorld> inproc_;          // the in-process world (no PlanWorld given)
  std::vector<std::unique_ptr<Device>> devices_;  // the local devices, by id
  std::vector<int> local_index_;                  // per device id: index in devices_, -1 when remote
  std::vector<std::thread> threads_;

  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool quit_ = false;
  Job job_;
  std::exception_ptr first_error_;
  PlanRunnerOptions options_;
};

}  // namespace braid::exec
