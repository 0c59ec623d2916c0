// Predicting a plan's step time, per stage, and its memory per device from a cost model: the formulas the
// search minimises (docs/planner.md, "Cost model"), computed directly from a complete plan. The trainer and
// bench call predict_step_time to set predictions beside measurements.
// Invariant: for every plan the search returns, predict()'s formula_step_time_s is the time the search
// reported for it, and so is step_time_s unless the cluster's devices share cores (host_cores > 0) and the
// plan pipelines; then step_time_s is the processor-sharing simulation (the search ranks by the formula and
// chooses among its best shapes by step_time_s). Runner costs (CostModel::step_overhead, ...) are in both.
#pragma once
#include <string>
#include <vector>

#include "graph/ir.h"
#include "planner/cost_model.h"
#include "planner/plan.h"

namespace braid::planner {

struct TrainSettings {
  int64_t batch = 1;                      // the run's global batch per optimizer step
  int optimizer_states = 2;               // AdamW 2 (m, v), SGD with momentum 1, plain SGD 0
  bool clip = false;                      // gradient-norm clipping (the norm and the scaling each step)
  double bucket_bytes = 25.0 * (1 << 20); // data-parallel gradient all-reduce bucket (PyTorch DDP's 25 MiB)
  // Mixed precision (set by apply_precision, the one place that decides it): the dtype of every floating-point
  // value the layers compute, hold and send (activations, the weights the products read, gradients); the
  // products run at the device's peak for it. master_bytes: per parameter, the fp32 master copy the optimizer
  // updates (4 under bf16 / f16, 0 under f32); optimizer states are fp32 (4 bytes each) in every precision.
  DType compute = DType::f32;
  double master_bytes = 0;
  // Cluster planning only: attention may split over its heads, as Megatron-LM runs it (LayerCosts; not yet a
  // signature the executor runs, so plans using it are predictions, not runnable).
  bool head_parallel_attention = false;
};
// optimizer_states for an optimizer named as in run files ("adamw", "sgd") with this momentum.
int optimizer_states(const std::string& type, double momentum);
// The run's `train.precision` as the planner sees it, for `braid plan`, `plan: auto` and `braid train` alike:
// on accelerators (cuda devices, cluster presets and files) bf16 / f16 compute in 16 bits with an fp32 master
// copy (ZeRO's 2 + 2 + 12 bytes per parameter under AdamW); on cpu devices every precision trains in f32
// (docs/gpu.md), so the settings stay f32. Unknown precisions are the run file's to reject; they plan as f32.
void apply_precision(TrainSettings& ts, const std::string& precision, bool accelerator);

// What a device holds for its `param_bytes` of parameters (in TrainSettings::compute) under ZeRO stage `zero`
// over a data-parallel group of `dp` (Rajbhandari et al. 2020: stage 1 shards the optimizer state, 2 also the
// gradients, 3 also the weights; docs/planner.md "Memory"): weights and gradients in the compute dtype, the
// optimizer's states and master copy in fp32.
struct ModelStates {
  double weights = 0, grads = 0, optimizer = 0;
  double total() const { return weights + grads + optimizer; }
};
ModelStates model_states(double param_bytes, const TrainSettings& ts, int zero, int dp);
// Parameters of `param_bytes` (compute dtype) as fp32 bytes: what the optimizer reads and writes per state.
double fp32_param_bytes(double param_bytes, const TrainSettings& ts);

struct StagePrediction {
  double forward_s = 0;      // one micro-batch: compute + tensor-group collectives + sending activations on
  double backward_s = 0;     // one micro-batch: compute + collectives + sending input gradients back
  double compute_s = 0;      // forward + backward compute of one micro-batch (no communication)
  double comm_s = 0;         // tensor-group collectives and point-to-point of one micro-batch
  double dp_sync_s = 0;      // data-parallel gradient all-reduce, all buckets
  double dp_exposed_s = 0;   // its part not hidden behind the last micro-batch's backward
  double optimizer_s = 0;
  double weight_read_s = 0;  // the step's first forward packing the weights from memory (CostModel::weight_read_time)
  double turn_s = 0;         // of compute_s: refilling a shared core's caches (CostModel::switch_time), per micro-batch
  double param_bytes = 0;    // trainable parameters per device (compute dtype; before ZeRO sharding)
  int param_tensors = 0;     // the trainable parameter tensors they are in
  double act_bytes = 0;      // activations kept per micro-batch per device (after recomputation)
  double recompute_s = 0;    // of backward_s: the forwards recomputed (full and selective), per micro-batch
  ModelStates states;        // what the device holds for its parameters under the plan's ZeRO stage
  double activation_bytes = 0;  // in_flight x act_bytes: the activations held at the peak
  // The backward's peak of activation gradients beyond the activations it has freed by then: max over the stage's
  // layers i of (i's grad_bytes - the kept bytes of the layers after i), at least 0 (docs/planner.md, "Memory").
  double grad_transient_bytes = 0;
  // ZeRO 3: the parameter tensors gathered whole at once, the one in use and the next, prefetched (exec/node_loop.cpp):
  // twice the stage's largest trainable tensor on one device; 0 otherwise.
  double gathered_bytes = 0;
  double zero_comm_s = 0;    // of forward_s + backward_s: ZeRO 2/3's exposed per-micro-batch collectives
  double memory_bytes = 0;   // peak per device: params, grads, optimizer state, activations x in flight, buffers
  int in_flight = 0;         // micro-batches whose activations are held at once
  double flops = 0;          // forward FLOPs of one micro-batch on one device
  double time() const { return forward_s + backward_s; }
  // After the last backward, once per step: the exposed sync, the optimizer, the weights from memory.
  double tail_s() const { return dp_exposed_s + optimizer_s + weight_read_s; }
};

struct StepPrediction {
  double step_time_s = 0;                // with host_cores > 0 and a pipeline: simulate_pipeline + max tail
  double formula_step_time_s = 0;        // pipeline_step's figure, what the search minimises
  double tail_s = 0;                     // of step_time_s: the longest stage tail plus the runner's per-step cost
  std::vector<StagePrediction> stages;  // in plan order (virtual stages included)
  double memory_limit_bytes = 0;        // per model chunk: the device's memory / virtual_stages
  bool fits = true;                     // every stage within memory_limit_bytes
  double peak_memory_bytes = 0;         // the most any device holds (its chunks together)
  // Shares of the step on its busiest stage: compute (its micro-batches' and the tail's optimizer update and
  // weight reads), communication (its collectives and sends, the tail's exposed gradient sync), bubble (the rest).
  double bubble_s = 0, compute_s = 0, comm_s = 0;
  std::string bound_by;                 // compute | communication | bubble | memory
  double tflops_per_device = 0;         // model FLOPs (forward + backward = 3x forward) per second per device
};

// Predicts `plan` (complete: run validate_plan first) for the graph it runs. Throws UserError when a layer's
// signature is not offered.
StepPrediction predict(const Plan& plan, const graph::Graph& g, const CostModel& model, const TrainSettings& s);
double predict_step_time(const Plan& plan, const graph::Graph& g, const CostModel& model, const TrainSettings& s);
// The plan with summary.predicted and every layer's predicted time and memory filled in.
void fill_predictions(Plan& plan, const graph::Graph& g, const CostModel& model, const TrainSettings& s);

// Pieces shared with the search (same formulas, same order of additions).
// Activation micro-batches held at once by (virtual) stage `k` of `stages`, on `p` device groups.
int in_flight(const std::string& schedule, int k, int p, int virtual_stages, int64_t micro_batches);
// Exposed data-parallel sync (all-reduce of param_bytes in buckets behind a backward of backward_s) and the
// total sync time.
void dp_sync(const CostModel& m, const Group& dp_group, double param_bytes, double backward_s, double bucket_bytes,
             double* total, double* exposed);
// The same under ZeRO stage `zero` (0: dp_sync) on a stage of `param_bytes` in `tensors` trainable parameter
// tensors, as Engine runs them: one collective per tensor (each costs the collective's latency, the bytes are
// those of the whole), on the device thread. Stage 1: dp_sync's all-reduce in buckets behind the backward, then
// every parameter broadcast from the replica that updated it (an all-gather's figure per tensor), exposed. Stage 2:
// no buckets (the gradients are reduced per micro-batch, below), the broadcast after the optimizer as stage 1's.
// Stage 3: nothing after the optimizer (each replica keeps its parameters' shard).
void zero_sync(const CostModel& m, const Group& dp_group, double param_bytes, int tensors, double backward_s,
               double bucket_bytes, int zero, double* total, double* exposed);
// ZeRO 2 and 3's collectives of one micro-batch on such a stage: stage 2 reduces each gradient to the replica that
// keeps it right after the node that makes it (a reduce-scatter's figure per tensor), stage 3 also broadcasts each
// weight from its holder just before its use in the forward and again in the backward (an all-gather's figure per
// tensor, twice). All exposed: the executors run the reductions inline, and on CPU devices of one process a
// prefetched gather is a copy on the cores the compute needs (docs/benchmarks.md, "Sharding": prefetched and inline
// within the noise). 0 for stages 0 and 1.
double zero_micro_batch_comm(const CostModel& m, const Group& dp_group, double param_bytes, int tensors, int zero);
// zero_sync and zero_micro_batch_comm in two parts: what depends only on the parameters (the collectives' times:
// the search computes them once per front entry) and the overlap with the backward. The functions above are these
// two composed: the same figures.
struct ZeroCommParts {
  int zero = 0;
  bool none = true;          // no replicas or no parameters: nothing to sync
  double overlapped = 0;     // stages 0-1: the all-reduce behind the backward
  double last = 0;           // its last bucket, exposed whatever the backward
  double gather = 0;         // stages 1-2: the parameters' broadcasts after the optimizer
  double total = 0;          // zero_sync's total
  double mb_scatter = 0, mb_gather = 0;  // stages 2-3: one micro-batch's reductions and (3) one pass's gathers
};
ZeroCommParts zero_comm_parts(const CostModel& m, const Group& dp_group, double param_bytes, int tensors,
                              double bucket_bytes, int zero);
void zero_sync(const ZeroCommParts& z, double backward_s, double* total, double* exposed);
double zero_micro_batch_comm(const ZeroCommParts& z);
// (m v - 1) max T + (1/v) sum T + max tail.
// Inline: the search's cut DP evaluates it most.
inline double pipeline_step(double max_t, double sum_t, double max_tail, int64_t micro_batches, int virtual_stages) {
  return (static_cast<double>(micro_batches) * virtual_stages - 1) * max_t + sum_t / virtual_stages + max_tail;
}

// Processor sharing (docs/planner.md, "Pipelines on shared cores"): one (virtual) stage's micro-batch.
// compute times are those with every device of the cluster busy (how the cost model's figures are
// measured); comm is point-to-point and tensor-group collectives, which take the same time whatever runs.
struct StageWork {
  double forward_compute_s = 0, forward_comm_s = 0;
  double backward_compute_s = 0, backward_comm_s = 0;
  int devices = 1;  // devices running this stage at once (its data x tensor group)
};
// Speed of a device's compute relative to the all-busy figures when `busy` of the cluster's `devices`
// devices compute on `cores` shared cores: each device runs max(1, cores / devices) threads, so the busy
// ones get min(1, cores / (busy x threads)) of their threads' cores, against min(1, cores / devices) when
// all are busy. >= 1; 1 when cores <= 0.
double shared_speed(int busy, int devices, int cores);
// The makespan of the forwards and backwards of `schedule` (gpipe | 1f1b | interleaved) on `p` pipeline
// devices, v chunks each, m micro-batches (stage k on device k % p, in the order of exec/schedule.h's
// generators): an event simulation in which a forward waits for the previous stage's forward (with its
// send), a backward for its forward and the next stage's backward, and every computing device runs at
// shared_speed(devices computing at that moment) -- rates change as devices start and stop.
double simulate_pipeline(const std::string& schedule, int p, int v, int64_t m, const std::vector<StageWork>& stages,
                         int devices, int cores);
// The same with the speed given per number of computing devices: speed[b], b = 0 .. the cluster's devices.
double simulate_pipeline(const std::string& schedule, int p, int v, int64_t m, const std::vector<StageWork>& stages,
                         const std::vector<double>& speed);
// Whether predict() simulates pipelines on `c` (its devices share cores: host_cores > 0 or a measured
// busy_speed), and the speed table it uses: the measured Cluster::busy_speed, else shared_speed's rule.
bool simulates(const Cluster& c);
std::vector<double> busy_speeds(const Cluster& c);

}  // namespace braid::planner
