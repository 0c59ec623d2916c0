// Plan lowering: a validated plan (src/planner/plan.h) and the model -> one program per pipeline stage,
// run by every device of the stage's group. A stage program is an ordinary graph::Graph for one replica's
// micro-batch (plan.summary.micro_batch samples) holding the stage's forward layers on their shards, every
// reshard explicit as a comm_* node (src/ops/defs/collective.cpp) wherever a producer's layout over the
// tensor group differs from what its consumer's split signature needs, and the backward that autodiff
// derives from it (so backward communication follows from the gradient rules of the comm_* ops).
//
// Layout rules (each value is B, S(axis) or P over the stage's tensor group of tp devices):
//   - a layer with tensor_parallel 1 is replicated: every input B, every output B;
//   - otherwise its signature (by name, from the op's splits()) gives each input's and output's layout;
//     a B input of such a layer passes through comm_copy (Megatron's f: its gradient is all-reduced);
//   - parameters are held per device as their layout says: S(a) as the device's slice, B and P whole
//     (P enters through comm_to_partial: rank 0 holds the value, the others zeros);
//   - values crossing to the next stage, and the loss, are made B; a stage receives them whole.
// Data parallelism is outside the program: every replica runs the same program on its part of the
// micro-batch and the runner all-reduces parameter gradients over the stage's data-parallel group.
// Invariants: forward nodes keep the model's node names (random masks key on them); a device's program
// differs from its group's others only in the data it holds, never in its nodes (collectives match).
#pragma once
#include <string>
#include <vector>

#include "exec/schedule.h"
#include "graph/ir.h"
#include "io/model_spec.h"
#include "planner/plan.h"

namespace braid::exec {

// How every device of a stage holds one parameter or buffer of the model.
struct ParamShard {
  std::string name;     // the model's name ("h.0.fc.weight")
  TensorDesc global;    // the model's (unsplit) description
  ops::Sbp layout;      // S(axis): a slice per tensor rank; B or P: whole on every tensor rank
  int parts = 1;        // the tensor group's size
  bool buffer = false;
};

// An activation crossing from a stage to the next, whole (B) on every device, for one replica's micro-batch.
struct BoundaryValue {
  std::string name;     // the model's value name ("h.0.res2")
  TensorDesc desc;
  bool needs_grad = false;  // float and depending on a trainable parameter: its gradient travels back
  std::string grad_name;    // "d/<name>": its gradient's name in traces
};

struct StageProgram {
  int stage = 0;                      // index in plan.stages (pipeline order)
  std::vector<int> devices;           // the stage's group, mesh row-major: device (r, t) = devices[r * tp + t]
  int dp = 1, tp = 1;
  graph::Graph g;                     // forward (with comm nodes) then backward
  std::vector<std::string> model_inputs;  // model inputs the stage reads (inputs of g by the same name)
  std::vector<BoundaryValue> recv;    // from stage - 1, in order
  std::vector<ValueId> recv_values;   // inputs of g holding them
  std::vector<ValueId> recv_grads;    // the gradient of each, sent back (kNoValue: none)
  std::vector<BoundaryValue> send;    // to stage + 1, in order (equal to stage + 1's recv)
  std::vector<ValueId> send_values;   // values of g (B)
  std::vector<ValueId> send_grads;    // inputs of g receiving their gradients (kNoValue: none)
  ValueId loss;                       // valid on the stage holding the loss (B)
  std::vector<ParamShard> params;     // every parameter and buffer of the stage
  std::vector<bool> stash;            // per value of g: lives from forward to backward (executor slots)
  std::vector<ValueId> keep;          // values read after a run
  int forward_nodes = 0;              // nodes before the first backward node
};

// Lowers `plan` (validated against the model's graph for `plan.summary.micro_batch` samples) into one
// program per stage. Throws UserError for what lowering does not support (naming the layer): a layer
// split over fewer devices than its stage's tensor group, a parameter used by two layers with different
// layouts.
struct LowerOptions {
  // Batch norm over the data-parallel group: on stages with data_parallel > 1, every batch_norm becomes the
  // bn_sync_* ops (src/ops/defs/batch_norm.cpp), whose statistics and gradients are those of one device
  // over the whole micro-batch. Off: per-device statistics, as PyTorch's DDP without SyncBatchNorm.
  bool sync_batch_norm = false;
  // 16-bit values between ops (graph::BuildOptions::half: bf16 on accelerators of one stage without tensor
  // parallelism); f32 otherwise.
  DType half = DType::f32;
  // ZeRO stage 3 (plan summary zero: 3) on stages with data_parallel > 1: every read of a trainable parameter goes
  // through a comm_gather_param node just before the node that reads it (its holder broadcasts it), recomputed in
  // backward like a selective recomputation, so that a gathered copy lives only around its use.
  bool zero3 = false;
};
std::vector<StageProgram> lower_plan(const io::ModelSpec& m, const planner::Plan& plan, const LowerOptions& options = {});
// The same from the model's forward graph at the plan's micro-batch, built with options.half values.
std::vector<StageProgram> lower_plan(const graph::Graph& model, const planner::Plan& plan, const LowerOptions& options = {});

// The tensor-group size of a stage's mesh [dp, t1, t2, ...] (the product of the axes after the first).
int tensor_group_size(const planner::StagePlan& s);

// The shard of `d` that layout `s` over `parts` devices gives each of them.
TensorDesc shard_desc(const TensorDesc& d, const ops::Sbp& s, int parts);

// The device of stage p's mesh at (replica, tensor rank); the devices of its tensor group of one replica and of its
// data-parallel group at one tensor rank (the ranks a communicator split() lists).
inline int stage_device(const StageProgram& p, int replica, int tensor_rank) {
  return p.devices.at(static_cast<size_t>(replica * p.tp + tensor_rank));
}
std::vector<int> tensor_group(const StageProgram& p, int replica);
std::vector<int> data_group(const StageProgram& p, int tensor_rank);

// The shard entry of parameter `name` in stage program `p` (an internal error when it holds none).
const ParamShard& shard_of(const StageProgram& p, const std::string& name);

// Tensor rank `rank`'s part of a whole tensor under shard `sh`: its slice when the parameter is split over the
// tensor group, else all of it (take_shard); and back into the whole tensor (put_shard). init_shard draws the
// whole tensor from the run's seed, as one device would, and keeps the part.
void take_shard(const Tensor& whole, Tensor& part, const ParamShard& sh, int rank);
void put_shard(const Tensor& part, Tensor& whole, const ParamShard& sh, int rank);
void init_shard(Tensor& part, const ParamShard& sh, const ops::InitSpec& init, uint64_t seed, int rank);
// Whether rank `rank`'s copy of this shard is the one that counts (gathers, norms): a slice, or tensor rank 0's.
inline bool shard_counts(const ParamShard& sh, int rank) {
  return rank == 0 || (sh.layout.kind == ops::Sbp::Kind::Split && sh.parts > 1);
}

// The schedule of a plan's summary: GPipe, 1F1B or interleaved 1F1B over its pipeline stages and micro-batches.
Schedule schedule_of(const planner::Summary& s);

// Message tag of boundary value `value` of cut `cut` (between stages cut and cut + 1): its activation, or its
// gradient travelling back. Messages of one tag arrive in micro-batch order.
inline int boundary_tag(int cut, size_t value, bool grad) { return (cut * 2 + (grad ? 1 : 0)) * 4096 + static_cast<int>(value); }

}  // namespace braid::exec
