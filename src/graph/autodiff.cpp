// Reverse sweep over the forward nodes; each op's GradFn emits its backward nodes through GradEmitter.
#include "graph/autodiff.h"

#include <algorithm>
#include <functional>

#include "ops/registry.h"

namespace braid::graph {
namespace {

class GradEmitter : public ops::GradBuilder {
 public:
  GradEmitter(Graph& g, const Node& fwd)
      : g_(g), layer_(fwd.layer), name_(fwd.name), loc_(fwd.loc), batch_offset_per_rank_(fwd.batch_offset_per_rank),
        shard_axis_(fwd.shard_axis) {}
  std::vector<ValueId> emit(const std::string& op, const ops::Attrs& attrs, const std::vector<ValueId>& inputs) override {
    const ops::OpDef& def = ops::Registry::get().at(op);
    ops::Attrs a = attrs;
    ops::complete_attrs(def, a);
    std::vector<ValueId> out =
        g_.add_node(def, a, inputs, static_cast<int>(inputs.size()), "d/" + name_ + "/" + op, layer_, loc_, true);
    // A backward node that draws its forward's random numbers again (rng_node: the dropout mask) draws them at
    // its forward's place in a split too: the same global indices (batch offset of its tensor rank, shard axis),
    // or a rank other than 0 would redraw another mask than its forward used.
    if (!out.empty() && a.has("rng_node") && a.s("rng_node") == name_) {
      auto& n = const_cast<Node&>(g_.node(g_.value(out[0]).producer));  // as the lowering sets them
      n.batch_offset_per_rank = batch_offset_per_rank_;
      n.shard_axis = shard_axis_;
    }
    return out;
  }
  const TensorDesc& desc(ValueId v) const override { return g_.value(v).desc; }

 private:
  Graph& g_;
  std::string layer_, name_;
  SourceLoc loc_;
  int64_t batch_offset_per_rank_ = 0;
  int shard_axis_ = -1;
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
    const ValueId seed = e.emit("ones_like", {}, {loss})[0];
    const_cast<Node&>(g.node(g.value(seed).producer)).loss_seed = true;  // loss scaling finds it by this mark
    contrib[loss.idx()].push_back(seed);
  }
  for (const auto& [v, grad] : spec.seeds)
    if (needs_grad[v.idx()]) contrib[v.idx()].push_back(grad);

  // Recomputation: which values a group recomputes (remapped to their clones in backward), and the clones, made
  // on first use.
  const auto& group = spec.recompute_group;
  BRAID_ASSERT(group.empty() || group.size() == num_forward, "recompute groups for ", group.size(), " of ",
               num_forward, " forward nodes");
  const size_t num_values = g.values().size();
  std::vector<int> recomputed_by(num_values, -1);  // value -> its group, when the group recomputes it
  for (size_t n = 0; n < group.size(); ++n) {
    const int gr = group[n];
    if (gr < 0) continue;
    for (ValueId v : g.nodes()[n].outputs) {
      bool outside = false;  // a forward node of another group (or none) reads it: the group's checkpoint
      for (NodeId c : g.value(v).consumers)
        outside = outside || (c.idx() < num_forward && group[c.idx()] != gr);
      if (!(outside && spec.keeps_outputs.at(static_cast<size_t>(gr)))) recomputed_by[v.idx()] = gr;
    }
  }
  std::vector<ValueId> clone_of(num_values, kNoValue);
  std::vector<bool> emitted(spec.keeps_outputs.size(), false);
  std::function<void(int)> emit_group = [&](int gr) {
    if (emitted[static_cast<size_t>(gr)]) return;
    emitted[static_cast<size_t>(gr)] = true;
    for (size_t n = 0; n < num_forward; ++n) {
      if (group[n] != gr) continue;
      const Node fwd = g.nodes()[n];  // copy: adding nodes grows the vector
      std::vector<ValueId> in = fwd.inputs;
      for (ValueId& v : in) {
        const int other = recomputed_by[v.idx()];
        if (other < 0) continue;
        if (other != gr) emit_group(other);
        v = clone_of[v.idx()];
        BRAID_ASSERT(v.valid(), "recomputation of ", fwd.name, " reads a value recomputed after it");
      }
      std::vector<TensorDesc> out;
      for (ValueId v : fwd.outputs) out.push_back(g.value(v).desc);
      auto outs = g.add_node_with_outputs(*fwd.op, fwd.attrs, in, fwd.num_data_inputs, "r/" + fwd.name, fwd.layer,
                                          fwd.loc, true, out);
      Node& clone = const_cast<Node&>(g.node(g.value(outs[0]).producer));
      clone.rng_as = rng_name(fwd);
      clone.sharded = fwd.sharded;
      clone.batch_offset_per_rank = fwd.batch_offset_per_rank;
      clone.shard_axis = fwd.shard_axis;
      for (size_t k = 0; k < outs.size(); ++k) clone_of[fwd.outputs[k].idx()] = outs[k];
    }
  };
  // The values a gradient rule reads, with the recomputed ones replaced by their clones.
  auto recomputed = [&](const std::vector<ValueId>& vs) {
    std::vector<ValueId> out = vs;
    for (ValueId& v : out)
      if (v.idx() < num_values && recomputed_by[v.idx()] >= 0) {
        emit_group(recomputed_by[v.idx()]);
        v = clone_of[v.idx()];
      }
    return out;
  };

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
    const std::vector<ValueId> ins = group.empty() ? node.inputs : recomputed(node.inputs);
    const std::vector<ValueId> outs = group.empty() ? node.outputs : recomputed(node.outputs);
    GradEmitter e(g, node);
    ops::GradCtx c{e, node.attrs, ins, outs, dout, needs, std::vector<ValueId>(node.inputs.size(), kNoValue), node.name};
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
