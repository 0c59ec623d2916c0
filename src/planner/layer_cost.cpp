// Layer options and reshard costs (planner/layer_cost.h). The reshard table follows lowering:
// B->S slice (backward: all-gather of the gradient), S->B all-gather (backward: nothing), P->B all-reduce
// (backward: nothing), P->S reduce-scatter (backward: all-gather), S(a)->S(b) all-gather then slice (backward:
// all-gather), anything else -> P is not offered by lowering (infeasible).
#include "planner/layer_cost.h"

#include <algorithm>

#include "planner/plan.h"

namespace braid::planner {

bool weight_gradients_only(const graph::Graph& g, const graph::Node& n) {
  if (n.inputs.empty() || !n.op->differentiable) return false;
  const auto& nd = n.op->nondiff_inputs;
  const graph::Value& x = g.value(n.inputs[0]);
  if (!is_float(x.desc.dtype) || std::find(nd.begin(), nd.end(), 0) != nd.end() ||
      x.kind == graph::ValueKind::Activation || x.kind == graph::ValueKind::Param)
    return false;
  for (ValueId v : n.inputs)
    if (g.value(v).kind == graph::ValueKind::Param) return true;
  return false;
}

std::string layout_str(Layout l) {
  if (l == kLayoutB) return "B";
  if (l == kLayoutP) return "P";
  return "S(" + std::to_string(l) + ")";
}

bool LayerOption::all_b() const {
  for (Layout l : in)
    if (l != kLayoutB) return false;
  for (Layout l : out)
    if (l != kLayoutB) return false;
  return true;
}

LayerCosts::LayerCosts(const graph::Graph& g, const CostModel& model, int64_t micro_batch, int tp, Group tensor_group,
                       DType compute, bool head_parallel_attention)
    : g_(g), model_(model), b_(micro_batch), tp_(tp), group_(tensor_group), compute_(compute) {
  fwd_ = forward_layers(g);
  layer_of_node_.assign(g.nodes().size(), -1);
  for (size_t i = 0; i < fwd_.size(); ++i) layer_of_node_[fwd_[i]->id.idx()] = static_cast<int>(i);
  options_.resize(fwd_.size());
  for (size_t i = 0; i < fwd_.size(); ++i) {
    const graph::Node& n = *fwd_[i];
    options_[i].push_back(make_option(n, nullptr, 1));
    if (tp <= 1) continue;
    std::vector<TensorDesc> in, out;
    for (ValueId v : n.inputs) in.push_back(g.value(v).desc);
    for (ValueId v : n.outputs) out.push_back(g.value(v).desc);
    std::vector<ops::SplitSignature> sigs;
    try {
      sigs = n.op->splits ? n.op->splits(n.attrs, in, out) : ops::all_broadcast(in, out);
    } catch (const ops::OpError&) {
      continue;
    }
    for (const auto& s : sigs) {
      if (s.name == "replicated" || s.inputs.size() != n.inputs.size() || s.outputs.size() != n.outputs.size()) continue;
      // Every S(axis) divides evenly into tp parts (the batch axis counts micro_batch samples).
      bool even = true;
      auto check = [&](ValueId v, const ops::Sbp& sbp) {
        if (sbp.kind != ops::Sbp::Kind::Split) return;
        const graph::Value& val = g.value(v);
        int axis = val.desc.shape.norm_axis(sbp.axis);
        if (axis < 0 || axis >= val.desc.shape.rank()) {
          even = false;
          return;
        }
        bool batched = val.kind == graph::ValueKind::Input || val.kind == graph::ValueKind::Activation;
        int64_t size = batched && axis == 0 ? b_ : val.desc.shape[axis];
        even &= size % tp == 0 && sbp.splits_evenly(size, tp);
      };
      for (size_t k = 0; k < s.inputs.size(); ++k) check(n.inputs[k], s.inputs[k]);
      for (size_t k = 0; k < s.outputs.size(); ++k) check(n.outputs[k], s.outputs[k]);
      // Lowering does not combine a partial scalar (a per-device mean, e.g. a loss split over the batch).
      for (size_t k = 0; k < s.outputs.size(); ++k)
        if (s.outputs[k].kind == ops::Sbp::Kind::Partial && g.value(n.outputs[k]).desc.shape.rank() == 0) even = false;
      if (even) options_[i].push_back(make_option(n, &s, tp));
    }
    // Modelled only: attention over its heads (Megatron-LM's tensor-parallel attention). Inputs x, in_proj_weight
    // [(h + 2 kv_heads) dh, d], in_proj_bias likewise, out_proj.weight [d, d], out_proj.bias [d]; outputs the result
    // [B, T, d] (partial: out_proj's columns split), qkv [B, T, (h + 2 kv_heads) dh], context [B, T, d], lse [B, h, T]
    // (split like the heads). Grouped-query attention keeps each q head with its kv head: tp must divide kv_heads
    // (each device h / tp q heads and kv_heads / tp kv heads), else the option is not offered. The op's cost is of
    // the whole layer: each device runs 1/tp of it.
    if (head_parallel_attention && n.op->name == "attention" && find(static_cast<int>(i), "heads", tp) < 0 &&
        (n.attrs.has("kv_heads") ? n.attrs.i("kv_heads") : n.attrs.i("heads")) % tp == 0 &&
        (n.inputs.size() == 5 || n.inputs.size() == 3) && n.outputs.size() == 4) {
      const bool bias = n.inputs.size() == 5;
      ops::SplitSignature h{"heads", {ops::Sbp::B(), ops::Sbp::S(0)}, {ops::Sbp::P(), ops::Sbp::S(2), ops::Sbp::S(2), ops::Sbp::S(1)}};
      if (bias) h.inputs.push_back(ops::Sbp::S(0));
      h.inputs.push_back(ops::Sbp::S(1));
      if (bias) h.inputs.push_back(ops::Sbp::B());
      LayerOption o = make_option(n, &h, tp);
      o.backward_s -= o.grad_sync_s;
      o.forward_s /= tp;
      o.backward_s = o.backward_s / tp + o.grad_sync_s;
      o.flops /= tp;
      options_[i].push_back(o);
    }
  }
}

int LayerCosts::layer_of(NodeId n) const {
  return n.valid() && n.idx() < layer_of_node_.size() ? layer_of_node_[n.idx()] : -1;
}

int LayerCosts::find(int layer, const std::string& signature, int tensor_parallel) const {
  const auto& opts = options(layer);
  for (size_t k = 0; k < opts.size(); ++k)
    if (opts[k].signature == signature && (opts[k].tensor_parallel == tensor_parallel || (tp_ == 1 && tensor_parallel == 1)))
      return static_cast<int>(k);
  return -1;
}

TensorDesc LayerCosts::local_desc(ValueId v, Layout l, int tp) const {
  const graph::Value& val = g_.value(v);
  TensorDesc d = val.desc;
  bool batched = val.kind == graph::ValueKind::Input || val.kind == graph::ValueKind::Activation;
  if (batched && d.shape.rank() > 0) d.shape[0] = b_;
  if (compute_ != DType::f32 && d.dtype == DType::f32) d.dtype = compute_;
  if (l >= 0 && l < d.shape.rank() && tp > 1) d.shape[l] = std::max<int64_t>(1, d.shape[l] / tp);
  return d;
}

double LayerCosts::value_bytes(ValueId v) const { return static_cast<double>(local_desc(v, kLayoutB, 1).bytes()); }

double LayerCosts::group_input_bytes(int a, int b) const {
  std::vector<ValueId> seen;
  double bytes = 0;
  for (int i = a; i < b; ++i) {
    const graph::Node& n = node(i);
    for (int q = 0; q < n.num_data_inputs; ++q) {
      ValueId v = n.inputs[static_cast<size_t>(q)];
      const graph::Value& val = g_.value(v);
      if (val.kind != graph::ValueKind::Activation && val.kind != graph::ValueKind::Input) continue;
      int p = layer_of(val.producer);
      if (p >= a && p < b) continue;
      if (std::find(seen.begin(), seen.end(), v) != seen.end()) continue;
      seen.push_back(v);
      bytes += value_bytes(v);
    }
  }
  return bytes;
}

bool LayerCosts::needs_grad(const graph::Node& n, int input) const {
  const graph::Value& v = g_.value(n.inputs[static_cast<size_t>(input)]);
  if (v.kind == graph::ValueKind::Param) {
    const graph::ParamInfo* p = g_.find_param(v.name);
    return p && !p->spec.buffer && is_float(v.desc.dtype);
  }
  if (v.kind != graph::ValueKind::Activation || !n.op->differentiable || !is_float(v.desc.dtype)) return false;
  return std::find(n.op->nondiff_inputs.begin(), n.op->nondiff_inputs.end(), input) == n.op->nondiff_inputs.end();
}

bool LayerCosts::shared_param(ValueId v) const {
  const graph::Value& val = g_.value(v);
  if (val.kind != graph::ValueKind::Param) return false;
  int users = 0;
  for (NodeId c : val.consumers) users += layer_of_node_[c.idx()] >= 0 ? 1 : 0;
  return users > 1;
}

LayerOption LayerCosts::make_option(const graph::Node& n, const ops::SplitSignature* sig, int tp) const {
  LayerOption o;
  o.signature = sig ? sig->name : "replicated";
  o.tensor_parallel = tp;
  auto to_layout = [&](ValueId v, const ops::Sbp& s) -> Layout {
    if (s.kind == ops::Sbp::Kind::Broadcast) return kLayoutB;
    if (s.kind == ops::Sbp::Kind::Partial) return kLayoutP;
    return g_.value(v).desc.shape.norm_axis(s.axis);
  };
  std::vector<TensorDesc> in, out;
  for (size_t k = 0; k < n.inputs.size(); ++k) {
    o.in.push_back(sig ? to_layout(n.inputs[k], sig->inputs[k]) : kLayoutB);
    in.push_back(local_desc(n.inputs[k], o.in.back(), tp));
  }
  // An in-place op (OpDef::in_place: relu) whose input is read by it alone writes its output over that input
  // (exec/memory_plan.cpp): the two are one tensor, counted once, with the layer that made it.
  bool over_input = false;
  if (n.op->in_place && !n.inputs.empty() && !n.outputs.empty()) {
    const graph::Value& x = g_.value(n.inputs[0]);
    over_input = x.kind == graph::ValueKind::Activation && x.consumers.size() == 1 &&
                 x.desc.bytes() == g_.value(n.outputs[0]).desc.bytes();
  }
  for (size_t k = 0; k < n.outputs.size(); ++k) {
    o.out.push_back(sig ? to_layout(n.outputs[k], sig->outputs[k]) : kLayoutB);
    out.push_back(local_desc(n.outputs[k], o.out.back(), tp));
    if (!(k == 0 && over_input)) o.act_bytes += static_cast<double>(out.back().bytes());
  }
  // Backward: the gradient of the first output (the one gradients flow into: attention's other outputs, a batch
  // norm's statistics, a dropout's mask are kept for the backward, not differentiated) and of each activation
  // input that takes one; memory_plan.cpp writes an in-place op's input gradient over its output's.
  if (n.op->differentiable && !out.empty() && is_float(out[0].dtype)) {
    const double dy = static_cast<double>(out[0].bytes());
    double dx = 0;
    for (size_t k = 0; k < n.inputs.size(); ++k)
      if (g_.value(n.inputs[k]).kind == graph::ValueKind::Activation && needs_grad(n, static_cast<int>(k)))
        dx += static_cast<double>(in[k].bytes());
    o.grad_bytes = n.op->in_place ? std::max(dy, dx) : dy + dx;
  }
  o.forward_s = model_.forward_time(*n.op, n.attrs, in, out);
  if (n.op->differentiable) {
    o.backward_s = model_.backward_time(*n.op, n.attrs, in, out);
    if (weight_gradients_only(g_, n)) o.backward_s *= kWeightHalfOfBackward;
  }
  o.flops = ops::op_cost(*n.op, n.attrs, in, out).flops;
  o.cheap = n.op->cheap_recompute && n.op->mutated_inputs.empty();
  if (n.op->workspace) o.workspace_bytes = static_cast<double>(n.op->workspace(n.attrs, in, out));
  bool all_b = o.all_b();
  for (size_t k = 0; k < n.inputs.size(); ++k) {
    const graph::Value& v = g_.value(n.inputs[k]);
    if (v.kind == graph::ValueKind::Param) {
      const graph::ParamInfo* p = g_.find_param(v.name);
      if (p && p->layer != n.layer) {
        // A tied parameter (linear's `tie`): counted once, with the layer that owns it.
      } else if (p && !p->spec.buffer) {
        o.param_bytes += static_cast<double>(in[k].bytes());
        o.largest_param_bytes = std::max(o.largest_param_bytes, static_cast<double>(in[k].bytes()));
        ++o.param_tensors;
      } else {
        o.buffer_bytes += static_cast<double>(in[k].bytes());
      }
    }
    if (!all_b && o.in[k] == kLayoutB && needs_grad(n, static_cast<int>(k)))
      o.grad_sync_s += model_.collective_time(Collective::AllReduce, static_cast<double>(in[k].bytes()), group_);
  }
  o.backward_s += o.grad_sync_s;
  return o;
}

Reshard LayerCosts::reshard(ValueId v, Layout from, Layout to) const {
  Reshard r;
  if (from == to || tp_ <= 1) return r;
  double bytes = value_bytes(v);
  auto coll = [&](Collective c) { return model_.collective_time(c, bytes, group_); };
  if (to == kLayoutP) {
    r.forward_s = r.backward_s = kInfeasible;
    return r;
  }
  r.buffer_bytes = bytes;
  if (from == kLayoutB) {  // to S: slice
    r.buffer_bytes = bytes / tp_;
    r.backward_s = coll(Collective::AllGather);
  } else if (from == kLayoutP) {
    if (to == kLayoutB) {
      r.forward_s = coll(Collective::AllReduce);
    } else {
      r.forward_s = coll(Collective::ReduceScatter);
      r.backward_s = coll(Collective::AllGather);
    }
  } else if (to == kLayoutB) {  // S -> B
    r.forward_s = coll(Collective::AllGather);
  } else {  // S(a) -> S(b)
    r.forward_s = coll(Collective::AllGather);
    r.backward_s = coll(Collective::AllGather);
  }
  return r;
}

}  // namespace braid::planner
