// Reverse sweep over the forward nodes; each op's GradFn emits its backward nodes through GradEmitter.
#include "graph/autodiff.h"

#include <algorithm>

#include "ops/registry.h"

namespace braid::graph {
namespace {

class GradEmitter : public ops::GradBuilder {
 public:
  GradEmitter(Graph& g, const Node& fwd) : g_(g), layer_(fwd.layer), name_(fwd.name), loc_(fwd.loc) {}
  std::vector<ValueId> emit(const std::string& op, const ops::Attrs& attrs, const std::vector<ValueId>& inputs) override {
    const ops::OpDef& def = ops::Registry::get().at(op);
    ops::Attrs a = attrs;
    ops::complete_attrs(def, a);
    return g_.add_node(def, a, inputs, static_cast<int>(inputs.size()), "d/" + name_ + "/" + op, layer_, loc_, true);
  }
  const TensorDesc& desc(ValueId v) const override { return g_.value(v).desc; }

 private:
  Graph& g_;
  std::string layer_, name_;
  SourceLoc loc_;
};

}  // namespace

void append_backward(Graph& g) {
  BRAID_ASSERT(g.loss().valid(), "graph has no loss");
  append_backward(g, BackwardSpec{});
}

std::vector<ValueId> append_backward(Graph& g, const BackwardSpec& spec) {
  const ValueId loss = g.loss();
  const size_t num_forward = g.nodes().size();
  std::vector<ValueId> result(spec.wants.size(), kNoValue);

  // 1. Which values depend on a trainable parameter (only those need gradients).
  std::vector<bool> needs_grad(g.values().size(), false);
  for (const auto& p : g.params())
    if (!p.spec.buffer) needs_grad[p.value.idx()] = true;
  for (ValueId v : spec.wants) needs_grad[v.idx()] = true;
  for (size_t n = 0; n < num_forward; ++n) {
    const Node& node = g.nodes()[n];
    if (!node.op->differentiable) continue;
    bool any = false;
    for (ValueId v : node.inputs) any |= needs_grad[v.idx()];
    if (any)
      for (ValueId v : node.outputs) needs_grad[v.idx()] = true;
  }
  bool any_seed = loss.valid() && needs_grad[loss.idx()];
  for (const auto& [v, grad] : spec.seeds) any_seed |= needs_grad[v.idx()];
  if (!any_seed) return result;  // nothing to train

  // 2. Seed and reverse sweep; contributions[v] are the gradient pieces of value v still to be summed.
  std::vector<std::vector<ValueId>> contrib(g.values().size());
  auto total = [&](ValueId v, const Node& at) -> ValueId {
    auto& c = contrib[v.idx()];
    if (c.empty()) return kNoValue;
    if (c.size() > 1) {
      GradEmitter e(g, at);
      ValueId sum = e.emit("add", {}, c)[0];
      c.assign(1, sum);
    }
    return c[0];
  };
  if (loss.valid() && needs_grad[loss.idx()]) {
    const Node& producer = g.node(g.value(loss).producer);
    GradEmitter e(g, producer);
    contrib[loss.idx()].push_back(e.emit("ones_like", {}, {loss})[0]);
  }
  for (const auto& [v, grad] : spec.seeds)
    if (needs_grad[v.idx()]) contrib[v.idx()].push_back(grad);
  for (size_t n = num_forward; n-- > 0;) {
    const Node node = g.nodes()[n];  // copy: emitting nodes grows the vector
    if (!node.op->differentiable) continue;
    std::vector<ValueId> dout;
    bool any = false;
    for (ValueId v : node.outputs) {
      dout.push_back(total(v, node));
      any |= dout.back().valid();
    }
    if (!any) continue;
    std::vector<bool> needs;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      ValueId v = node.inputs[i];
      bool nondiff = std::find(node.op->nondiff_inputs.begin(), node.op->nondiff_inputs.end(), static_cast<int>(i)) !=
                     node.op->nondiff_inputs.end();
      needs.push_back(needs_grad[v.idx()] && !nondiff && is_float(g.value(v).desc.dtype));
    }
    if (std::none_of(needs.begin(), needs.end(), [](bool b) { return b; })) continue;
    GradEmitter e(g, node);
    ops::GradCtx c{e, node.attrs, node.inputs, node.outputs, dout, needs,
                   std::vector<ValueId>(node.inputs.size(), kNoValue), node.name};
    node.op->grad(c);
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      if (!needs[i] || !c.din[i].valid()) continue;
      BRAID_ASSERT(g.value(c.din[i]).desc.shape == g.value(node.inputs[i]).desc.shape, "gradient of input ", i,
                   " of '", node.name, "' has shape ", g.value(c.din[i]).desc.shape.str(), ", input has ",
                   g.value(node.inputs[i]).desc.shape.str());
      contrib[node.inputs[i].idx()].push_back(c.din[i]);
    }
  }

  // 3. Parameter gradients (summed when a parameter is used more than once).
  for (auto& p : g.params()) {
    if (p.spec.buffer || contrib[p.value.idx()].empty()) continue;
    const Node& first_user = g.node(g.value(p.value).consumers.front());
    p.grad = total(p.value, first_user);
  }
  // 4. The gradients the caller asked for (summed where a value has several uses).
  for (size_t i = 0; i < spec.wants.size(); ++i) {
    ValueId v = spec.wants[i];
    if (contrib[v.idx()].empty()) continue;
    const Value& val = g.value(v);
    NodeId at = !val.consumers.empty() ? val.consumers.front() : val.producer;
    if (contrib[v.idx()].size() > 1) BRAID_ASSERT(at.valid(), "value ", val.name, " has several gradients but no node");
    result[i] = at.valid() ? total(v, g.node(at)) : contrib[v.idx()][0];
  }
  return result;
}

}  // namespace braid::graph
