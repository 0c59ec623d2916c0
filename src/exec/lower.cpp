// Plan lowering; see lower.h.
#include "exec/lower.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "backends/cpu/executor.h"
#include "exec/param_store.h"
#include "graph/autodiff.h"
#include "graph/build.h"
#include "graph/verify.h"
#include "ops/registry.h"

namespace braid::exec {
namespace {

using graph::Graph;
using graph::Node;
using graph::ValueKind;
using ops::Sbp;

std::string q(const std::string& s) { return "'" + s + "'"; }

// Lowers one stage: builds its graph node by node, keeping for every model value the local value that
// holds it and that value's layout, and inserting reshards (cached per value and target layout).
class StageLowering {
 public:
  StageLowering(const Graph& model, StageProgram& out, const std::map<std::string, const planner::LayerPlan*>& layer_plans,
                const LowerOptions& options, const planner::Plan& plan)
      : model_(model), p_(out), layer_plans_(layer_plans), options_(options), plan_(plan),
        local_(model.values().size()), layout_(model.values().size()) {}

  void add_recv(const BoundaryValue& b, ValueId model_value) {
    ValueId v = p_.g.add_input("recv/" + b.name, b.desc);
    p_.recv_values.push_back(v);
    set(model_value, v, Sbp::B());
    if (b.needs_grad) wants_.push_back(v);
  }

  void add_node(const Node& n) {
    const planner::LayerPlan* lp = layer_plans_.count(n.layer) ? layer_plans_.at(n.layer) : nullptr;
    const int tp = p_.tp;
    std::vector<TensorDesc> in_descs, out_descs;
    for (ValueId v : n.inputs) in_descs.push_back(model_.value(v).desc);
    for (ValueId v : n.outputs) out_descs.push_back(model_.value(v).desc);
    ops::SplitSignature sig{"replicated", std::vector<Sbp>(n.inputs.size(), Sbp::B()),
                            std::vector<Sbp>(n.outputs.size(), Sbp::B())};
    if (lp && lp->tensor_parallel > 1 && tp > 1) {
      if (lp->tensor_parallel != tp)
        throw UserError(lp->loc, "layer " + q(n.layer) + " is split over " + std::to_string(lp->tensor_parallel) +
                                     " devices but its stage's tensor group has " + std::to_string(tp),
                        "this release splits a layer over its stage's whole tensor group (tensor_parallel " +
                            std::to_string(tp) + ") or replicates it (tensor_parallel 1)");
      auto sigs = n.op->splits ? n.op->splits(n.attrs, in_descs, out_descs) : ops::all_broadcast(in_descs, out_descs);
      auto it = std::find_if(sigs.begin(), sigs.end(), [&](const auto& s) { return s.name == lp->signature; });
      BRAID_ASSERT(it != sigs.end(), "validated plan names signature ", lp->signature, " that ", n.name, " lacks");
      sig = *it;
    } else if (plan_.summary.sequence_parallel && tp > 1 && !in_descs.empty() && in_descs[0].shape.rank() == 3 &&
               !n.op->batch_statistics && n.op->mutated_inputs.empty()) {
      // Sequence parallelism: a replicated layer of [batch, seq, hidden] values on its tensor rank's part of the
      // sequence, when its op splits so and gives split values (no partial sums: not a loss).
      auto sigs = n.op->splits ? n.op->splits(n.attrs, in_descs, out_descs) : ops::all_broadcast(in_descs, out_descs);
      auto it = std::find_if(sigs.begin(), sigs.end(), [&](const auto& s) {
        return s.name == "split1" &&
               std::all_of(s.outputs.begin(), s.outputs.end(), [](const Sbp& o) { return o == Sbp::S(1); });
      });
      if (it != sigs.end()) sig = *it;
    }
    const bool split_op = std::any_of(sig.inputs.begin(), sig.inputs.end(), [](const Sbp& s) { return !(s == Sbp::B()); }) ||
                          std::any_of(sig.outputs.begin(), sig.outputs.end(), [](const Sbp& s) { return !(s == Sbp::B()); });
    std::vector<ValueId> inputs;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const graph::Value& val = model_.value(n.inputs[i]);
      if (val.kind == ValueKind::Param || val.kind == ValueKind::Buffer)
        inputs.push_back(param_input(n, val, sig.inputs[i], split_op));
      else
        inputs.push_back(as_layout(n.inputs[i], sig.inputs[i], split_op, n.name));
    }
    for (size_t k = 0; k < out_descs.size(); ++k)
      if (sig.outputs[k].kind == Sbp::Kind::Partial && out_descs[k].shape.rank() == 0)
        throw UserError(lp->loc, "layer " + q(n.layer) + " (" + n.op->name + ") with signature " + q(sig.name) +
                                     " leaves a per-device mean to combine, which this release does not lower",
                        "replicate the loss layer (tensor_parallel 1); its input may still arrive split");
    std::vector<TensorDesc> local_out;
    for (size_t k = 0; k < out_descs.size(); ++k) local_out.push_back(shard_desc(out_descs[k], sig.outputs[k], tp));
    std::vector<ValueId> outs;
    if (n.op->batch_statistics && options_.sync_batch_norm && p_.dp > 1) {
      if (tp > 1 && sig.inputs[0] == Sbp::S(0))
        throw UserError(lp->loc, "layer " + q(n.layer) + ": synchronised batch norm does not combine with splitting the "
                                     "batch over the tensor group (signature 'data')",
                        "replicate the layer in its tensor group, or split it by channel");
      outs = sync_batch_norm(n, inputs, local_out);
    } else {
      outs = p_.g.add_node_with_outputs(*n.op, n.attrs, inputs, n.num_data_inputs, n.name, n.layer, n.loc, false,
                                        local_out);
    }
    auto& node = const_cast<Node&>(p_.g.node(p_.g.value(outs[0]).producer));
    node.sharded = split_op;
    if (tp > 1 && !sig.inputs.empty() && sig.inputs[0] == Sbp::S(0))
      node.batch_offset_per_rank = p_.g.value(inputs[0]).desc.shape[0];
    if (tp > 1 && !sig.inputs.empty() && sig.inputs[0].kind == Sbp::Kind::Split && sig.inputs[0].axis > 0)
      node.shard_axis = sig.inputs[0].axis;
    for (size_t k = 0; k < outs.size(); ++k) set(n.outputs[k], outs[k], sig.outputs[k]);
  }

  void finish(const std::vector<ValueId>& send_model_values, ValueId model_loss) {
    for (size_t k = 0; k < send_model_values.size(); ++k) {
      ValueId v = as_layout(send_model_values[k], Sbp::B(), false, "send/" + p_.send[k].name);
      p_.send_values.push_back(v);
      ValueId grad = kNoValue;
      if (p_.send[k].needs_grad) {
        grad = p_.g.add_input("grad/" + p_.send[k].name, p_.send[k].desc);
        seeds_.emplace_back(v, grad);
      }
      p_.send_grads.push_back(grad);
    }
    if (model_loss.valid() && local_[model_loss.idx()].valid()) {
      p_.loss = as_layout(model_loss, Sbp::B(), false, "loss");
      p_.g.outputs.emplace_back("loss", p_.loss);
    }
    p_.forward_nodes = static_cast<int>(p_.g.nodes().size());
    graph::BackwardSpec spec{seeds_, wants_, {}, {}};
    recompute_groups(spec);
    auto grads = graph::append_backward(p_.g, spec);
    p_.recv_grads.assign(p_.recv_values.size(), kNoValue);
    for (size_t i = 0, w = 0; i < p_.recv.size(); ++i)
      if (p_.recv[i].needs_grad) p_.recv_grads[i] = grads[w++];
  }

  void add_model_input(const std::string& name, ValueId model_value) {
    ValueId v = p_.g.add_input(name, model_.value(model_value).desc);
    p_.model_inputs.push_back(name);
    set(model_value, v, Sbp::B());
  }
  bool has(ValueId model_value) const { return local_[model_value.idx()].valid(); }

 private:
  // Activation recomputation (docs/plan_file.md, `recompute`) as graph structure: autodiff clones the groups'
  // nodes before the backward that needs them. full: the consecutive nodes of one block copy ("h.3.*": the layer
  // name up to its last dot; layers outside blocks: consecutive ones together) form a group that keeps only what
  // leaves it; selective: each cheap op (OpDef::cheap_recompute: normalisations, activations) is recomputed from
  // its input. A node that updates state in place (batch norm's running statistics) is never run twice.
  void recompute_groups(graph::BackwardSpec& spec) const {
    const auto& nodes = p_.g.nodes();
    spec.recompute_group.assign(nodes.size(), -1);
    bool any = false;
    std::string prev_block;
    for (size_t i = 0; i < nodes.size(); ++i) {
      const Node& n = nodes[i];
      const std::string& mode = planner::recompute_of(plan_, n.layer);
      // ZeRO-3's parameter gathers are recomputed whatever the mode: again in backward, right before the nodes that
      // read the parameter there (inside a fully recomputed block they go with the block).
      const bool gather = n.op->collective_kind == ops::CollectiveKind::ParamGather;
      if ((mode == "none" && !gather) || !n.op->mutated_inputs.empty()) {
        prev_block.clear();
        continue;
      }
      if (mode != "full") {  // selective, or a gather: each node alone, from its inputs
        prev_block.clear();
        if (!gather && !n.op->cheap_recompute) continue;
        spec.recompute_group[i] = static_cast<int>(spec.keeps_outputs.size());
        spec.keeps_outputs.push_back(false);
        any = true;
        continue;
      }
      const size_t dot = n.layer.rfind('.');
      const std::string block = dot == std::string::npos ? std::string() : n.layer.substr(0, dot);
      if (i > 0 && spec.recompute_group[i - 1] >= 0 && block == prev_block &&
          spec.keeps_outputs[static_cast<size_t>(spec.recompute_group[i - 1])]) {
        spec.recompute_group[i] = spec.recompute_group[i - 1];
      } else {
        spec.recompute_group[i] = static_cast<int>(spec.keeps_outputs.size());
        spec.keeps_outputs.push_back(true);
      }
      prev_block = block;
      any = true;
    }
    if (!any) spec.recompute_group.clear();
  }

  void set(ValueId model_value, ValueId local, Sbp layout) {
    local_[model_value.idx()] = local;
    layout_[model_value.idx()] = layout;
  }

  // batch_norm over the data-parallel group: local sums, all-reduced, then the normalisation (lower.h).
  std::vector<ValueId> sync_batch_norm(const Node& n, const std::vector<ValueId>& in,
                                       const std::vector<TensorDesc>& out) {
    const TensorDesc& x = p_.g.value(in[0]).desc;
    const int64_t total = x.shape.numel() / x.shape[1] * p_.dp;
    auto add = [&](const std::string& op, ops::Attrs attrs, const std::vector<ValueId>& inputs, int num_data) {
      const ops::OpDef& def = ops::Registry::get().at(op);
      ops::complete_attrs(def, attrs);
      return p_.g.add_node(def, attrs, inputs, num_data, n.name + "/" + op, n.layer, n.loc, false);
    };
    const ops::Attrs group{{"group", std::string("data")}, {"parts", static_cast<int64_t>(p_.dp)}};
    ValueId s1 = add("comm_all_reduce", group, {add("bn_sync_sum", {}, {in[0]}, 1)[0]}, 1)[0];
    ValueId s2 = add("comm_all_reduce", group, {add("bn_sync_sqdev", {{"total", total}}, {in[0], s1}, 2)[0]}, 1)[0];
    ops::Attrs attrs{{"eps", n.attrs.f("eps")}, {"momentum", n.attrs.f("momentum")}, {"total", total},
                     {"parts", static_cast<int64_t>(p_.dp)}};
    std::vector<ValueId> inputs{in[0], s1, s2};
    inputs.insert(inputs.end(), in.begin() + 1, in.end());
    return p_.g.add_node_with_outputs(ops::Registry::get().at("bn_sync_apply"), attrs, inputs, 3, n.name, n.layer,
                                      n.loc, false, out);
  }

  ValueId emit(const std::string& op, ops::Attrs attrs, ValueId x, const std::string& at) {
    const ops::OpDef& def = ops::Registry::get().at(op);
    attrs.set("parts", static_cast<int64_t>(p_.tp));
    ops::complete_attrs(def, attrs);
    return p_.g.add_node(def, attrs, {x}, 1, at + "/" + op, at, SourceLoc{}, false)[0];
  }

  // The model value `mv` in layout `want` (and through comm_copy when a split op consumes it whole).
  ValueId as_layout(ValueId mv, Sbp want, bool into_split_op, const std::string& at) {
    BRAID_ASSERT(local_[mv.idx()].valid(), "value ", model_.value(mv).name, " is not on this stage");
    auto key = std::make_tuple(mv.v, want.str(), into_split_op);
    if (auto it = cache_.find(key); it != cache_.end()) return it->second;
    ValueId x = local_[mv.idx()];
    Sbp cur = layout_[mv.idx()];
    auto axis = [](int a) { return ops::Attrs{{"axis", static_cast<int64_t>(a)}}; };
    using K = Sbp::Kind;
    if (!(cur == want)) {
      // Segmented splits (Sbp::seg) hold parameters and an op's saved state, which no other layer reads.
      BRAID_ASSERT(!cur.segmented() && !want.segmented(), "no reshard of ", model_.value(mv).name, " from ", cur.str(),
                   " to ", want.str());
      if (cur.kind == K::Partial) {  // P -> B or S
        x = want.kind == K::Split ? emit("comm_reduce_scatter", axis(want.axis), x, at) : emit("comm_all_reduce", {}, x, at);
        cur = want.kind == K::Split ? want : Sbp::B();
      }
      if (cur.kind == K::Split && !(cur == want)) {  // S -> B first
        x = emit("comm_all_gather", axis(cur.axis), x, at);
        cur = Sbp::B();
      }
      if (cur.kind == K::Broadcast && want.kind == K::Split) {
        x = emit("comm_slice", axis(want.axis), x, at);
        cur = want;
      } else if (cur.kind == K::Broadcast && want.kind == K::Partial) {
        x = emit("comm_to_partial", {}, x, at);
        cur = want;
      }
      BRAID_ASSERT(cur == want, "no reshard from ", layout_[mv.idx()].str(), " to ", want.str());
    }
    if (want.kind == K::Broadcast && into_split_op) x = emit("comm_copy", {}, x, at);
    cache_[key] = x;
    return x;
  }

  ValueId param_input(const Node& n, const graph::Value& val, Sbp want, bool split_op) {
    const graph::ParamInfo* info = model_.find_param(val.name);
    BRAID_ASSERT(info, "no parameter ", val.name);
    Sbp stored = want.kind == Sbp::Kind::Split ? want : Sbp::B();
    auto it = params_.find(val.name);
    if (it == params_.end()) {
      ops::ParamSpec spec = info->spec;
      spec.desc = shard_desc(info->spec.desc, stored, p_.tp);
      ValueId v = p_.g.add_param_named(info->name, info->layer, spec);
      p_.params.push_back({info->name, info->spec.desc, stored, p_.tp, info->spec.buffer});
      it = params_.emplace(val.name, std::make_pair(v, stored)).first;
    } else if (!(it->second.second == stored)) {
      throw UserError(n.loc, "parameter " + q(val.name) + " is used by two layers that hold it differently (" +
                                 it->second.second.str() + " and " + stored.str() + ")",
                      "give the layers sharing it the same signature");
    }
    ValueId v = it->second.first;
    if (info->spec.buffer) return v;  // updated in place by its op: never through a copy
    if (options_.zero3 && p_.dp > 1) {  // ZeRO-3: from the replica holding it, just before this node
      ops::Attrs attrs{{"group", std::string("data")}, {"parts", static_cast<int64_t>(p_.dp)}, {"param", info->name}};
      const ops::OpDef& def = ops::Registry::get().at("comm_gather_param");
      ops::complete_attrs(def, attrs);
      v = p_.g.add_node(def, attrs, {v}, 1, n.name + "/gather:" + info->name, n.layer, SourceLoc{}, false)[0];
    }
    if (want.kind == Sbp::Kind::Partial) return emit("comm_to_partial", {}, v, n.name);
    if (want.kind == Sbp::Kind::Broadcast && split_op) return emit("comm_copy", {}, v, n.name);
    return v;
  }

  const Graph& model_;
  StageProgram& p_;
  const std::map<std::string, const planner::LayerPlan*>& layer_plans_;
  const LowerOptions& options_;
  const planner::Plan& plan_;
  std::vector<ValueId> local_;
  std::vector<Sbp> layout_;
  std::map<std::tuple<int32_t, std::string, bool>, ValueId> cache_;
  std::map<std::string, std::pair<ValueId, Sbp>> params_;
  std::vector<std::pair<ValueId, ValueId>> seeds_;
  std::vector<ValueId> wants_;
};

// Which model values depend on a trainable parameter (float values only), as autodiff decides.
std::vector<bool> requires_grad(const Graph& g) {
  std::vector<bool> r(g.values().size(), false);
  for (const auto& p : g.params())
    if (!p.spec.buffer) r[p.value.idx()] = true;
  for (const auto& n : g.nodes()) {
    if (!n.op->differentiable) continue;
    bool any = false;
    for (ValueId v : n.inputs) any |= r[v.idx()];
    if (any)
      for (ValueId v : n.outputs) r[v.idx()] = is_float(g.value(v).desc.dtype);
  }
  return r;
}

// Values of the lowered graph that must survive from a micro-batch's forward to its backward (or be read
// after it): each gets a copy per in-flight micro-batch.
void mark_stash(StageProgram& p) {
  const Graph& g = p.g;
  p.stash.assign(g.values().size(), false);
  const int fb = p.forward_nodes;
  for (const auto& v : g.values()) {
    if (v.kind == ValueKind::Param || v.kind == ValueKind::Buffer) continue;
    int first = v.kind == ValueKind::Input ? -1 : v.producer.v;
    int last = first;
    for (NodeId c : v.consumers) last = std::max(last, c.v);
    if (v.kind == ValueKind::Input || (first < fb && last >= fb)) p.stash[v.id.idx()] = true;
  }
  for (ValueId v : p.keep)
    if (g.value(v).producer.valid() && g.value(v).producer.v < fb) p.stash[v.idx()] = true;
  for (ValueId v : p.recv_grads)
    if (v.valid()) p.stash[v.idx()] = true;
}

}  // namespace

int tensor_group_size(const planner::StagePlan& s) {
  int64_t t = 1;
  for (size_t i = 1; i < s.mesh.size(); ++i) t *= s.mesh[i];
  return static_cast<int>(t);
}

TensorDesc shard_desc(const TensorDesc& d, const ops::Sbp& s, int parts) {
  if (s.kind != Sbp::Kind::Split || parts == 1) return d;
  std::vector<int64_t> dims = d.shape.dims();
  BRAID_ASSERT(s.axis < static_cast<int>(dims.size()) && dims[static_cast<size_t>(s.axis)] % parts == 0 &&
                   s.splits_evenly(dims[static_cast<size_t>(s.axis)], parts),
               "cannot split ", d.str(), " along axis ", s.axis, " into ", parts);
  dims[static_cast<size_t>(s.axis)] /= parts;
  return TensorDesc{Shape(dims), d.dtype};
}

std::vector<StageProgram> lower_plan(const io::ModelSpec& m, const planner::Plan& plan, const LowerOptions& options) {
  graph::BuildOptions bo;
  bo.half = options.half;
  return lower_plan(graph::build_graph(m, plan.summary.micro_batch, bo), plan, options);
}

std::vector<StageProgram> lower_plan(const Graph& model, const planner::Plan& plan, const LowerOptions& options) {
  BRAID_ASSERT(model.batch() == plan.summary.micro_batch, "lowering a graph of batch ", model.batch(),
               " for micro-batches of ", plan.summary.micro_batch);
  const auto fwd = planner::forward_layers(model);
  std::map<std::string, int> layer_index;
  for (size_t i = 0; i < fwd.size(); ++i) layer_index[fwd[i]->layer] = static_cast<int>(i);
  std::map<std::string, const planner::LayerPlan*> layer_plans;
  for (const auto& l : plan.layers) layer_plans[l.layer] = &l;
  const int num_stages = static_cast<int>(plan.stages.size());

  // The stage of every forward node.
  std::vector<int> stage_of(model.nodes().size(), -1);
  for (int s = 0; s < num_stages; ++s) {
    int a = layer_index.at(plan.stages[static_cast<size_t>(s)].first_layer);
    int b = layer_index.at(plan.stages[static_cast<size_t>(s)].last_layer);
    for (int i = a; i <= b; ++i) stage_of[fwd[static_cast<size_t>(i)]->id.idx()] = s;
  }
  const auto needs = requires_grad(model);
  // Values crossing each cut: produced at stage <= s (activations), consumed at a stage > s.
  std::vector<std::vector<ValueId>> crossing(static_cast<size_t>(num_stages));
  for (const auto& v : model.values()) {
    if (v.kind != ValueKind::Activation) continue;
    int from = stage_of[v.producer.idx()], to = from;
    for (NodeId c : v.consumers) to = std::max(to, stage_of[c.idx()]);
    for (int s = from; s < to; ++s) crossing[static_cast<size_t>(s)].push_back(v.id);
  }

  std::vector<StageProgram> programs(static_cast<size_t>(num_stages));
  for (int s = 0; s < num_stages; ++s) {
    StageProgram& p = programs[static_cast<size_t>(s)];
    const planner::StagePlan& sp = plan.stages[static_cast<size_t>(s)];
    p.stage = s;
    p.devices = sp.devices;
    p.tp = tensor_group_size(sp);
    p.dp = static_cast<int>(sp.mesh.empty() ? 1 : sp.mesh[0]);
    p.g = Graph(plan.summary.micro_batch);
    StageLowering low(model, p, layer_plans, options, plan);
    if (s > 0)
      for (ValueId v : crossing[static_cast<size_t>(s - 1)]) {
        BoundaryValue b{model.value(v).name, model.value(v).desc, needs[v.idx()], "d/" + model.value(v).name};
        p.recv.push_back(b);
        low.add_recv(b, v);
      }
    for (const auto& n : model.nodes()) {
      if (stage_of[n.id.idx()] != s) continue;
      for (ValueId v : n.inputs)
        if (model.value(v).kind == ValueKind::Input && !low.has(v)) low.add_model_input(model.value(v).name, v);
      low.add_node(n);
    }
    std::vector<ValueId> send_model;
    if (s + 1 < num_stages)
      for (ValueId v : crossing[static_cast<size_t>(s)]) {
        send_model.push_back(v);
        p.send.push_back({model.value(v).name, model.value(v).desc, needs[v.idx()], "d/" + model.value(v).name});
      }
    low.finish(send_model, model.loss());
    graph::verify(p.g);
    if (p.loss.valid()) p.keep.push_back(p.loss);
    for (const auto& pi : p.g.params())
      if (pi.grad.valid()) p.keep.push_back(pi.grad);
    for (ValueId v : p.send_values) p.keep.push_back(v);
    for (ValueId v : p.recv_grads)
      if (v.valid()) p.keep.push_back(v);
    mark_stash(p);
  }
  return programs;
}

const ParamShard& shard_of(const StageProgram& p, const std::string& name) {
  for (const auto& s : p.params)
    if (s.name == name) return s;
  BRAID_ASSERT(false, "stage ", p.stage, " holds no parameter ", name);
  return p.params.front();
}

Schedule schedule_of(const planner::Summary& s) {
  if (s.schedule == "gpipe") return gpipe(s.pipeline_stages, static_cast<int>(s.micro_batches));
  if (s.schedule == "interleaved")
    return interleaved_1f1b(s.pipeline_stages, s.virtual_stages, static_cast<int>(s.micro_batches));
  return one_f_one_b(s.pipeline_stages, static_cast<int>(s.micro_batches));
}

namespace {
// A segmented split of axis 0 (Sbp::seg, attention's [q | k | v] rows under `heads`): chunk `rank` of every segment
// of `whole`'s rows, in segment order, is `part`; copied into part, or back into whole (to_whole).
void copy_segments(const Tensor& whole, const Tensor& part, const ops::Sbp& s, int rank, int parts, bool to_whole) {
  const int64_t rows = whole.shape().rank() > 0 ? whole.shape()[0] : 0;
  BRAID_ASSERT(s.axis == 0 && rows > 0 && s.splits_evenly(rows, parts) && part.bytes() * static_cast<size_t>(parts) == whole.bytes(),
               "segmented shard ", s.str(), " of ", whole.desc().str(), " into ", part.desc().str(), " x ", parts);
  const int64_t unit = rows / (s.seg[0] + s.seg[1] + s.seg[2]);
  const size_t row_bytes = whole.bytes() / static_cast<size_t>(rows);
  auto* w = static_cast<char*>(whole.raw());
  auto* p = static_cast<char*>(part.raw());
  int64_t at = 0, local = 0;
  for (int64_t seg : s.seg) {
    const int64_t chunk = seg * unit / parts;
    char* wp = w + static_cast<size_t>(at + rank * chunk) * row_bytes;
    char* pp = p + static_cast<size_t>(local) * row_bytes;
    const size_t n = static_cast<size_t>(chunk) * row_bytes;
    if (to_whole) std::memcpy(wp, pp, n);
    else std::memcpy(pp, wp, n);
    at += seg * unit;
    local += chunk;
  }
}
}  // namespace

void take_shard(const Tensor& whole, Tensor& part, const ParamShard& sh, int rank) {
  if (sh.layout.segmented() && sh.parts > 1) copy_segments(whole, part, sh.layout, rank, sh.parts, false);
  else if (sh.layout.kind == ops::Sbp::Kind::Split && sh.parts > 1) copy_chunk(whole, part, sh.layout.axis, rank, sh.parts);
  else part.copy_from(whole);
}

void put_shard(const Tensor& part, Tensor& whole, const ParamShard& sh, int rank) {
  if (sh.layout.segmented() && sh.parts > 1) copy_segments(whole, part, sh.layout, rank, sh.parts, true);
  else if (sh.layout.kind == ops::Sbp::Kind::Split && sh.parts > 1) copy_chunk(part, whole, sh.layout.axis, rank, sh.parts, true);
  else whole.copy_from(part);
}

void init_shard(Tensor& part, const ParamShard& sh, const ops::InitSpec& init, uint64_t seed, int rank) {
  Tensor whole = Tensor::empty(sh.global);
  init_tensor(whole, init, seed, sh.name);
  take_shard(whole, part, sh, rank);
}

std::vector<int> tensor_group(const StageProgram& p, int replica) {
  std::vector<int> ranks;
  for (int t = 0; t < p.tp; ++t) ranks.push_back(stage_device(p, replica, t));
  return ranks;
}

std::vector<int> data_group(const StageProgram& p, int tensor_rank) {
  std::vector<int> ranks;
  for (int r = 0; r < p.dp; ++r) ranks.push_back(stage_device(p, r, tensor_rank));
  return ranks;
}

}  // namespace braid::exec
