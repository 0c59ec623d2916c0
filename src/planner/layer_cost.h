// The cost of one forward layer under one choice (split signature x tensor_parallel) inside a stage, and of
// the reshards between a producer's layout and a consumer's, exactly as lowering runs a plan: every value is
// B, S(axis) or P over the stage's tensor group; a layer with tensor_parallel 1 computes replicated (all B).
// Shared by the evaluator (planner/evaluate.h) and the search, so that what the search minimises is what
// predict() reports. Pure: shapes and the cost model in, seconds and bytes out.
#pragma once
#include <limits>
#include <string>
#include <vector>

#include "graph/ir.h"
#include "planner/cost_model.h"

namespace braid::planner {

// A value's layout over a tensor group: B, P, or S(axis) with axis >= 0 (normalised).
using Layout = int;
constexpr Layout kLayoutB = -2;
constexpr Layout kLayoutP = -1;
std::string layout_str(Layout l);  // "B", "P", "S(1)"

// A layer with weights (a parameter input) whose floating-point data input (input 0) is not an activation —
// the first layer, reading the model's input — needs no input gradient: its backward is the weight half alone
// (linear's dW without dx, conv2d's grad_weight without grad_input), about half of the op's backward.
// LayerCosts charges such a layer that share; calibration leaves it out of the backward ratios it measures.
bool weight_gradients_only(const graph::Graph& g, const graph::Node& n);
constexpr double kWeightHalfOfBackward = 0.5;
constexpr double kInfeasible = std::numeric_limits<double>::infinity();

struct LayerOption {
  std::string signature = "replicated";
  int tensor_parallel = 1;
  std::vector<Layout> in;    // per node input (data inputs, then parameters)
  std::vector<Layout> out;   // per node output
  double forward_s = 0;      // compute of one micro-batch on one device
  double backward_s = 0;     // compute, plus all-reduce of the gradient of every B input (Megatron's f)
  double grad_sync_s = 0;    // that all-reduce alone (included in backward_s)
  double param_bytes = 0;    // trainable parameters on one device
  int param_tensors = 0;     // trainable parameter tensors (the same in every option of a layer)
  double buffer_bytes = 0;   // non-trained state on one device
  double act_bytes = 0;      // outputs kept for backward, one micro-batch, one device
  // The activation gradients its backward holds at once, one micro-batch, one device: its output's and those of
  // its inputs that take one (an in-place op writes the one over the other: the larger). They come on top of the
  // activations still kept at that point of the backward (docs/planner.md, "Memory").
  double grad_bytes = 0;
  double largest_param_bytes = 0;  // its largest trainable parameter tensor on one device (ZeRO 3 gathers it whole)
  double workspace_bytes = 0;
  double flops = 0;          // forward FLOPs on one device (for reports)
  bool cheap = false;        // OpDef::cheap_recompute: recomputed under `recompute: selective`
  bool all_b() const;
};

struct Reshard {
  double forward_s = 0, backward_s = 0;
  double buffer_bytes = 0;  // the largest temporary it needs on one device
  bool feasible() const { return forward_s != kInfeasible; }
};

// Every forward layer's options and every value's reshard cost for one stage shape: micro-batch `b` samples
// per replica, a tensor group of `tp` devices laid out as `tensor_group`. Options of a layer: "replicated"
// with tensor_parallel 1, then (tp > 1) each signature its op offers whose splits divide evenly into tp,
// with tensor_parallel tp, in the op's order. `compute`: the dtype every floating-point value (activations,
// parameters, gradients) is computed, held and sent in (TrainSettings::compute; the graph's are f32): bytes,
// collectives and the peak the products run at follow it.
class LayerCosts {
 public:
  // `head_parallel_attention`: also offer attention split over its heads, Megatron's way ("heads": the input
  // replicated, q/k/v rows and out_proj columns split, the output partial) where the op does not (attention with
  // dropout: ops/defs/attention.cpp offers `heads` itself without): modelled for cluster planning only (TrainSettings).
  LayerCosts(const graph::Graph& g, const CostModel& model, int64_t micro_batch, int tp, Group tensor_group,
             DType compute = DType::f32, bool head_parallel_attention = false);
  const graph::Graph& graph() const { return g_; }
  int layers() const { return static_cast<int>(fwd_.size()); }
  const graph::Node& node(int layer) const { return *fwd_[static_cast<size_t>(layer)]; }
  int layer_of(NodeId n) const;  // forward layer index of a node; -1 for none
  const std::vector<LayerOption>& options(int layer) const { return options_[static_cast<size_t>(layer)]; }
  // The option index of (signature, tensor_parallel) at `layer`, or -1.
  int find(int layer, const std::string& signature, int tensor_parallel) const;
  // Bytes of `v` whole (layout B) for one micro-batch of one replica.
  double value_bytes(ValueId v) const;
  Reshard reshard(ValueId v, Layout from, Layout to) const;
  int tp() const { return tp_; }
  int64_t micro_batch() const { return b_; }
  const CostModel& model() const { return model_; }
  // True when a gradient flows into this input of the layer's node (trainable parameter, float activation).
  bool needs_grad(const graph::Node& n, int input) const;
  // Bytes (layout B, one micro-batch) of the activations and model inputs that layers [a, b) read from before a:
  // what full recomputation of that group keeps (Korthikanti et al.'s 2sbh per transformer layer under bf16).
  double group_input_bytes(int a, int b) const;
  // A parameter value that more than one forward layer uses (a tied weight: linear's `tie`).
  bool shared_param(ValueId v) const;

 private:
  LayerOption make_option(const graph::Node& n, const ops::SplitSignature* sig, int tp) const;
  TensorDesc local_desc(ValueId v, Layout l, int tp) const;
  const graph::Graph& g_;
  const CostModel& model_;
  int64_t b_;
  int tp_;
  Group group_;
  DType compute_;
  std::vector<const graph::Node*> fwd_;
  std::vector<int> layer_of_node_;
  std::vector<std::vector<LayerOption>> options_;
};

}  // namespace braid::planner
