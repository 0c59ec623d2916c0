// The graph IR: values (tensors with a fixed desc) and nodes (one op application each), in topological
// order by construction (a node only consumes values that exist). Shapes and dtypes are inferred when a
// node is added, never at run time. Graph-level shapes carry the batch axis in front.
// The IR runs nothing; the executor (src/exec) does.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/ids.h"
#include "ops/op_def.h"

namespace braid::graph {

enum class ValueKind { Input, Param, Buffer, Activation };

struct Value {
  ValueId id;
  TensorDesc desc;
  ValueKind kind = ValueKind::Activation;
  std::string name;        // "fc" (a layer's main output), "fc:1" (extra outputs), "fc.weight", "d/fc"
  NodeId producer;         // invalid for inputs, params and buffers
  int out_index = 0;
  std::vector<NodeId> consumers;
};

struct Node {
  NodeId id;
  const ops::OpDef* op = nullptr;
  ops::Attrs attrs;                 // complete (defaults filled)
  std::vector<ValueId> inputs;      // data inputs, then parameters/buffers
  std::vector<ValueId> outputs;
  int num_data_inputs = 0;
  std::string name;                 // unique: the layer name for forward nodes
  std::string layer;                // the model layer this node belongs to (forward or backward)
  SourceLoc loc;                    // the layer's place in the model file
  bool backward = false;
  // Lowered graphs (src/exec/lower.h): a node whose samples are its tensor rank's part of the replica's
  // micro-batch (a batch split over the tensor group) starts at sample tensor_rank * batch_offset_per_rank;
  // the executor adds that to KernelCtx::batch_offset so random masks are the unsplit run's. 0: not split.
  int64_t batch_offset_per_rank = 0;
  // Lowered graphs: the node's data inputs are its tensor rank's equal part of axis `shard_axis` (> 0) of the
  // replica's values (sequence parallelism); the executor sets KernelCtx::shard_* from it. -1: not split so.
  int shard_axis = -1;
  // Lowered graphs: the node runs on shards whose descriptions the lowering set; the op's inference (which
  // checks shapes against attributes such as linear's `out`) does not describe them, so verify() skips it.
  bool sharded = false;
  // Activation recomputation (autodiff's BackwardSpec::recompute): a backward node that recomputes a forward node
  // draws that node's random numbers (dropout masks again, bit for bit): its name, to key the stream.
  std::string rng_as;
  // Autodiff's seed of the loss's gradient (ones_like of the loss): loss scaling multiplies it by the scale.
  bool loss_seed = false;
};

// The name whose hash keys a node's random stream in a step (KernelCtx::rng_key): its own, or, for a backward
// that draws its forward's random numbers again (attention_grad's `rng_node`: the dropout mask), the forward's.
inline const std::string& rng_name(const Node& n) {
  if (!n.rng_as.empty()) return n.rng_as;
  if (n.attrs.has("rng_node") && !n.attrs.s("rng_node").empty()) return n.attrs.s("rng_node");
  return n.name;
}

struct ParamInfo {
  std::string name;       // "h.0.fc.weight"
  std::string layer;      // "h.0.fc"
  ValueId value;
  ops::ParamSpec spec;    // local name, desc, init, buffer flag
  ValueId grad;           // after autodiff; invalid for buffers and unused params
};

class Graph {
 public:
  explicit Graph(int64_t batch = 1) : batch_(batch) {}

  ValueId add_input(const std::string& name, const TensorDesc& desc);
  ValueId add_param(const std::string& layer, const ops::ParamSpec& spec);
  // Adds a node (attrs must be complete), running the op's inference; throws ops::OpError from it.
  std::vector<ValueId> add_node(const ops::OpDef& op, const ops::Attrs& attrs, const std::vector<ValueId>& inputs,
                                int num_data_inputs, const std::string& name, const std::string& layer,
                                const SourceLoc& loc, bool backward);

  // The same with the output descriptions given instead of inferred: for lowered graphs, whose nodes run on
  // shards the op's inference (which checks shapes against attributes such as `out`) does not describe.
  std::vector<ValueId> add_node_with_outputs(const ops::OpDef& op, const ops::Attrs& attrs,
                                             const std::vector<ValueId>& inputs, int num_data_inputs,
                                             const std::string& name, const std::string& layer, const SourceLoc& loc,
                                             bool backward, const std::vector<TensorDesc>& outputs);
  // A parameter with a given full name (lowered graphs keep the unsplit model's names).
  ValueId add_param_named(const std::string& full_name, const std::string& layer, const ops::ParamSpec& spec);

  const Value& value(ValueId v) const { return values_.at(v.idx()); }
  const Node& node(NodeId n) const { return nodes_.at(n.idx()); }
  const std::vector<Value>& values() const { return values_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  std::vector<ParamInfo>& params() { return params_; }
  const std::vector<ParamInfo>& params() const { return params_; }
  const std::vector<ValueId>& inputs() const { return inputs_; }
  int64_t batch() const { return batch_; }

  // Named results: the training loss (outputs_[0]), other outputs, metrics, and every layer's value.
  std::vector<std::pair<std::string, ValueId>> outputs;
  std::vector<std::pair<std::string, ValueId>> metrics;
  std::map<std::string, ValueId> layer_values;
  ValueId loss() const { return outputs.empty() ? kNoValue : outputs[0].second; }
  const ParamInfo* find_param(const std::string& name) const;
  ValueId find_input(const std::string& name) const;
  std::string unique_node_name(const std::string& base);

 private:
  ValueId new_value(TensorDesc desc, ValueKind kind, std::string name);
  int64_t batch_;
  std::vector<Value> values_;
  std::vector<Node> nodes_;
  std::vector<ParamInfo> params_;
  std::vector<ValueId> inputs_;
  std::map<std::string, int> name_counts_;
};

}  // namespace braid::graph
