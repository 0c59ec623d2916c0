// Graph construction primitives: values, parameters, nodes with inference at insertion time.
#include "graph/ir.h"

namespace braid::graph {

ValueId Graph::new_value(TensorDesc desc, ValueKind kind, std::string name) {
  Value v;
  v.id = ValueId(static_cast<int32_t>(values_.size()));
  v.desc = std::move(desc);
  v.kind = kind;
  v.name = std::move(name);
  values_.push_back(std::move(v));
  return values_.back().id;
}

ValueId Graph::add_input(const std::string& name, const TensorDesc& desc) {
  ValueId v = new_value(desc, ValueKind::Input, name);
  inputs_.push_back(v);
  return v;
}

ValueId Graph::add_param(const std::string& layer, const ops::ParamSpec& spec) {
  std::string full = layer + "." + spec.name;
  ValueId v = new_value(spec.desc, spec.buffer ? ValueKind::Buffer : ValueKind::Param, full);
  params_.push_back(ParamInfo{full, layer, v, spec, kNoValue});
  return v;
}

ValueId Graph::add_param_named(const std::string& full, const std::string& layer, const ops::ParamSpec& spec) {
  ValueId v = new_value(spec.desc, spec.buffer ? ValueKind::Buffer : ValueKind::Param, full);
  params_.push_back(ParamInfo{full, layer, v, spec, kNoValue});
  return v;
}

std::string Graph::unique_node_name(const std::string& base) {
  int n = name_counts_[base]++;
  return n == 0 ? base : base + "#" + std::to_string(n);
}

std::vector<ValueId> Graph::add_node(const ops::OpDef& op, const ops::Attrs& attrs, const std::vector<ValueId>& inputs,
                                     int num_data_inputs, const std::string& name, const std::string& layer,
                                     const SourceLoc& loc, bool backward) {
  std::vector<TensorDesc> in;
  for (ValueId v : inputs) {
    BRAID_ASSERT(v.valid() && v.idx() < values_.size(), "node '", name, "' consumes an unknown value");
    in.push_back(values_[v.idx()].desc);
  }
  return add_node_with_outputs(op, attrs, inputs, num_data_inputs, name, layer, loc, backward,
                               op.infer(attrs, in));  // infer may throw ops::OpError
}

std::vector<ValueId> Graph::add_node_with_outputs(const ops::OpDef& op, const ops::Attrs& attrs,
                                                  const std::vector<ValueId>& inputs, int num_data_inputs,
                                                  const std::string& name, const std::string& layer,
                                                  const SourceLoc& loc, bool backward,
                                                  const std::vector<TensorDesc>& out) {
  BRAID_ASSERT(!out.empty(), "op ", op.name, " inferred no outputs");
  for (ValueId v : inputs)
    BRAID_ASSERT(v.valid() && v.idx() < values_.size(), "node '", name, "' consumes an unknown value");
  Node n;
  n.id = NodeId(static_cast<int32_t>(nodes_.size()));
  n.op = &op;
  n.attrs = attrs;
  n.inputs = inputs;
  n.num_data_inputs = num_data_inputs;
  n.name = unique_node_name(name);
  n.layer = layer;
  n.loc = loc;
  n.backward = backward;
  for (size_t k = 0; k < out.size(); ++k) {
    ValueId v = new_value(out[k], ValueKind::Activation, k == 0 ? n.name : n.name + ":" + std::to_string(k));
    values_[v.idx()].producer = n.id;
    values_[v.idx()].out_index = static_cast<int>(k);
    n.outputs.push_back(v);
  }
  for (ValueId v : inputs) values_[v.idx()].consumers.push_back(n.id);
  nodes_.push_back(std::move(n));
  return nodes_.back().outputs;
}

const ParamInfo* Graph::find_param(const std::string& name) const {
  for (const auto& p : params_)
    if (p.name == name) return &p;
  return nullptr;
}

ValueId Graph::find_input(const std::string& name) const {
  for (ValueId v : inputs_)
    if (values_[v.idx()].name == name) return v;
  return kNoValue;
}

}  // namespace braid::graph
