// Validation of a plan against the graph it runs: every mistake a hand-written plan can hold is reported
// at the plan file's field (file:line:col), all in one pass, before lowering sees the plan. It checks, it
// never repairs; dependent checks are skipped where what they depend on is already wrong (one mistake,
// one message). Plans built in code carry no locations; their messages name no place.
#include <algorithm>
#include <numeric>
#include <set>

#include "ops/op_def.h"
#include "planner/plan.h"

namespace braid::planner {
namespace {

std::string q(const std::string& s) { return "'" + s + "'"; }

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + v[i];
  return out;
}

template <typename T>
std::string list_str(const std::vector<T>& v) {
  std::vector<std::string> s;
  for (const auto& x : v) s.push_back(std::to_string(x));
  return "[" + join(s) + "]";
}

// Divisors of n in increasing order (n >= 1); empty when n is too large to list.
std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> lo, hi;
  if (n < 1 || n > (int64_t{1} << 40)) return {};
  for (int64_t d = 1; d * d <= n; ++d)
    if (n % d == 0) {
      lo.push_back(d);
      if (d != n / d) hi.push_back(n / d);
    }
  lo.insert(lo.end(), hi.rbegin(), hi.rend());
  return lo;
}

std::string nums(const std::vector<int64_t>& v) {
  std::vector<std::string> s;
  for (size_t i = 0; i < v.size() && i < 16; ++i) s.push_back(std::to_string(v[i]));
  if (v.size() > 16) s.push_back("...");
  return join(s);
}

class Validator {
 public:
  Validator(const Plan& plan, const graph::Graph& g, int64_t batch, const DeviceSpec& devices, Diagnostics& diags)
      : plan_(plan), s_(plan.summary), g_(g), batch_(batch), spec_(devices), diags_(diags) {
    for (const graph::Node* n : forward_layers(g)) {
      index_[n->layer] = static_cast<int>(fwd_.size());
      names_.push_back(n->layer);
      fwd_.push_back(n);
    }
  }

  void run() {
    // 1. Summary values: counts, schedule and virtual stages, micro-batches against the batch.
    check_summary();
    // 2. Stage device groups: ids, meshes, one stage per group (or round-robin chunks when interleaved).
    check_stage_groups();
    // 3. Stage layer ranges: known names, in order, contiguous, covering every forward layer once.
    check_stage_ranges();
    // 4. Layer entries: known, once each, signatures the op offers, tensor groups, even splits.
    check_layers();
    // 5. Parameters several layers use (linear's `tie`): on one stage, held alike by every user.
    check_shared_params();
  }

 private:
  // ---- locations -----------------------------------------------------------------------------------------
  const SourceLoc& or_plan(const SourceLoc& l) const { return l.valid() ? l : plan_.loc; }
  SourceLoc sloc(const std::string& key) const { return s_.pinned.loc(key, or_plan(s_.loc)); }
  SourceLoc stage_loc(const StagePlan& st, const std::string& key) const {
    return st.pinned.loc(key, or_plan(st.loc));
  }
  SourceLoc device_loc(const StagePlan& st, size_t k) const {
    return k < st.device_locs.size() ? st.device_locs[k] : stage_loc(st, "devices");
  }
  SourceLoc layer_loc(const LayerPlan& l, const std::string& key) const {
    return l.pinned.loc(key, or_plan(l.loc));
  }
  SourceLoc stages_loc() const { return plan_.pinned.loc("stages", plan_.loc); }

  bool interleaved() const { return s_.schedule == "interleaved"; }

  // ---- 1. summary --------------------------------------------------------------------------------------------
  void check_summary() {
    static const std::vector<std::string> kSchedules = {"gpipe", "1f1b", "interleaved"};
    if (std::find(kSchedules.begin(), kSchedules.end(), s_.schedule) == kSchedules.end()) {
      std::string hint = did_you_mean_hint(s_.schedule, kSchedules);
      diags_.error(sloc("schedule"), "unknown schedule " + q(s_.schedule) + "; expected gpipe, 1f1b or interleaved",
                   hint);
    }
    check_recompute(s_.recompute, sloc("recompute"), "in the summary");
    if (s_.zero < 0 || s_.zero > 3)
      diags_.error(sloc("zero"), "zero stage " + std::to_string(s_.zero) + " does not exist; expected 0, 1, 2 or 3",
                   "0: no sharding; 1: optimizer state sharded over each data-parallel group; 2: and the gradients; "
                   "3: and the parameters");
    else if (s_.zero >= 1 && s_.data_parallel == 1)
      diags_.error(sloc("zero"), "zero: " + std::to_string(s_.zero) + " shards " +
                                     (s_.zero == 1   ? "the optimizer state"
                                      : s_.zero == 2 ? "the optimizer state and gradients"
                                                     : "the optimizer state, gradients and parameters") +
                                     " over a data-parallel group, but data_parallel is 1",
                   "set data_parallel to 2 or more, or remove zero");
    if (s_.sequence_parallel && s_.tensor_parallel <= 1)
      diags_.error(sloc("sequence_parallel"),
                   "sequence_parallel splits the sequence inside tensor groups, but tensor_parallel is " +
                       std::to_string(s_.tensor_parallel),
                   "split some layers over a tensor group (tensor_parallel 2 or more), or remove sequence_parallel");
    const std::pair<const char*, int64_t> counts[] = {
        {"devices", s_.devices},           {"data_parallel", s_.data_parallel},
        {"tensor_parallel", s_.tensor_parallel}, {"pipeline_stages", s_.pipeline_stages},
        {"virtual_stages", s_.virtual_stages},   {"micro_batch", s_.micro_batch},
        {"micro_batches", s_.micro_batches}};
    for (const auto& [key, v] : counts)
      if (v < 1) {
        diags_.error(sloc(key), q(key) + " in the summary must be at least 1, got " + std::to_string(v));
        counts_ok_ = false;
      }
    if (!counts_ok_) return;
    // Virtual stages: several model chunks per device group only under the interleaved schedule.
    if (interleaved()) {
      if (s_.virtual_stages < 2)
        virtual_ok_ = false, diags_.error(s_.pinned.has("virtual_stages") ? sloc("virtual_stages") : sloc("schedule"),
                     "the interleaved schedule needs virtual_stages >= 2, got " + std::to_string(s_.virtual_stages),
                     "each device group holds virtual_stages model chunks; with one chunk use schedule: 1f1b");
      if (s_.micro_batches % s_.pipeline_stages != 0)
        diags_.error(sloc("micro_batches"),
                     "the interleaved schedule needs micro_batches to be a multiple of pipeline_stages (" +
                         std::to_string(s_.pipeline_stages) + "), got " + std::to_string(s_.micro_batches),
                     "Megatron's interleaving sends micro-batches through the chunks in groups of pipeline_stages");
    } else if (s_.virtual_stages != 1) {
      virtual_ok_ = false;
      diags_.error(sloc("virtual_stages"),
                   "virtual_stages " + std::to_string(s_.virtual_stages) + " needs the interleaved schedule; " +
                       q(s_.schedule) + " runs one stage per device group",
                   "write schedule: interleaved, or virtual_stages: 1");
    }
    // The batch: global = data_parallel x micro_batches x micro_batch.
    if (batch_ % s_.data_parallel != 0) {
      diags_.error(sloc("data_parallel"),
                   "the global batch of " + std::to_string(batch_) + " samples does not split evenly over " +
                       std::to_string(s_.data_parallel) + " data-parallel replicas",
                   "data_parallel must divide the batch: " + nums(divisors(batch_)));
      return;
    }
    int64_t per = batch_ / s_.data_parallel;
    if (per % s_.micro_batches != 0) {
      std::vector<int64_t> ok;
      for (int64_t d : divisors(per))
        if (!interleaved() || d % s_.pipeline_stages == 0) ok.push_back(d);
      diags_.error(sloc("micro_batches"),
                   "micro_batches " + std::to_string(s_.micro_batches) +
                       " does not divide the batch per data-parallel replica (" + std::to_string(batch_) + " / " +
                       std::to_string(s_.data_parallel) + " = " + std::to_string(per) + " samples)",
                   ok.empty() ? "" : "valid counts: " + nums(ok));
      return;
    }
    if (s_.micro_batch != per / s_.micro_batches)
      diags_.error(sloc("micro_batch"),
                   "micro_batch " + std::to_string(s_.micro_batch) + " disagrees with the batch: " +
                       std::to_string(batch_) + " samples / " + std::to_string(s_.data_parallel) + " replicas / " +
                       std::to_string(s_.micro_batches) + " micro-batches = " +
                       std::to_string(per / s_.micro_batches) + " per micro-batch",
                   "write micro_batch: " + std::to_string(per / s_.micro_batches));
  }

  // ---- 2. stage device groups ----------------------------------------------------------------------------
  void check_stage_groups() {
    if (plan_.stages.empty()) {
      diags_.error(stages_loc(), "the plan has no stages",
                   "e.g. stages:\n    - {devices: [0], mesh: [1, 1], first_layer: " +
                       (names_.empty() ? std::string("tok") : names_.front()) +
                       ", last_layer: " + (names_.empty() ? std::string("loss") : names_.back()) + "}");
      return;
    }
    const int P = s_.pipeline_stages, V = s_.virtual_stages;
    bool layout_ok = counts_ok_ && virtual_ok_ && static_cast<int64_t>(plan_.stages.size()) == int64_t{P} * V;
    if (counts_ok_ && virtual_ok_ && !layout_ok)
      diags_.error(sloc("pipeline_stages"),
                   "the plan lists " + std::to_string(plan_.stages.size()) + " stages but the summary says " +
                       (V == 1 ? "pipeline_stages: " + std::to_string(P)
                               : "pipeline_stages x virtual_stages = " + std::to_string(P) + " x " +
                                     std::to_string(V) + " = " + std::to_string(int64_t{P} * V)),
                   V > 1 ? "under interleaving, stage i runs on the devices of stage i % pipeline_stages"
                         : "pipeline_stages is the number of stages");
    std::set<int> used;
    for (size_t i = 0; i < plan_.stages.size(); ++i) {
      const StagePlan& st = plan_.stages[i];
      std::string who = "stage " + std::to_string(i);
      // Device ids: in range, each once.
      if (st.devices.empty()) diags_.error(stage_loc(st, "devices"), who + " has no devices");
      std::set<int> seen;
      for (size_t k = 0; k < st.devices.size(); ++k) {
        int d = st.devices[k];
        if (d < 0 || d >= spec_.count) {
          diags_.error(device_loc(st, k),
                       "device " + std::to_string(d) + " of " + who + " is out of range: the run has " +
                           std::to_string(spec_.count) + " " + spec_.kind + " device" + (spec_.count == 1 ? "" : "s") +
                           (spec_.count == 1 ? ", device 0" : ", devices 0 to " + std::to_string(spec_.count - 1)),
                       spec_.kind == "cpu"
                           ? "device ids count the run's devices from 0 (devices: cpu:" + std::to_string(spec_.count) + ")"
                           : "device ids index the run's device list from 0; list at least " +
                                 std::to_string(plan_.summary.devices) + " GPUs (cuda:0-" +
                                 std::to_string(plan_.summary.devices - 1) + ", or cuda:0,0,... to share one)");
        } else if (!seen.insert(d).second) {
          diags_.error(device_loc(st, k), "device " + std::to_string(d) + " appears twice in " + who);
        }
        used.insert(d);
      }
      // Mesh: [data_parallel, tensor group...], product = group size.
      SourceLoc mloc = stage_loc(st, "mesh");
      if (st.mesh.empty()) {
        diags_.error(mloc, who + " has an empty mesh", "e.g. mesh: [" + std::to_string(s_.data_parallel) + ", 1]");
        continue;
      }
      int64_t product = 1;
      bool mesh_ok = true;
      for (int64_t m : st.mesh) {
        if (m < 1) mesh_ok = false;
        else product = std::min<int64_t>(product * m, int64_t{1} << 40);
      }
      if (!mesh_ok) {
        diags_.error(mloc, "every axis of " + who + "'s mesh " + list_str(st.mesh) + " must be at least 1");
      } else if (product != static_cast<int64_t>(st.devices.size())) {
        diags_.error(mloc,
                     "the mesh " + list_str(st.mesh) + " of " + who + " holds " + std::to_string(product) +
                         " devices but the stage has " + std::to_string(st.devices.size()),
                     "the mesh is [data_parallel, tensor group] and its product is the number of devices, e.g. [" +
                         std::to_string(s_.data_parallel) + ", " +
                         std::to_string(std::max<size_t>(1, st.devices.size() / std::max(1, s_.data_parallel))) + "]");
      } else if (counts_ok_ && st.mesh[0] != s_.data_parallel) {
        diags_.error(mloc,
                     "the mesh " + list_str(st.mesh) + " of " + who + " has " + std::to_string(st.mesh[0]) +
                         " data-parallel replica" + (st.mesh[0] == 1 ? "" : "s") +
                         " (its first axis) but the summary says data_parallel: " +
                         std::to_string(s_.data_parallel),
                     "every stage's mesh is [data_parallel, tensor group]");
      }
      // Model chunk index: stage i is chunk i / pipeline_stages of device group i % pipeline_stages.
      int want = layout_ok && interleaved() ? static_cast<int>(i) / P : 0;
      if ((layout_ok || !interleaved()) && st.virtual_index != want)
        diags_.error(stage_loc(st, "virtual"),
                     who + " is model chunk " + std::to_string(want) + " of its device group, not " +
                         std::to_string(st.virtual_index),
                     interleaved() ? "stage i is chunk i / pipeline_stages on the devices of stage i % pipeline_stages"
                                   : "without interleaving every stage is chunk 0");
    }
    if (virtual_ok_) check_sharing(layout_ok);  // else whether stages may share devices is unclear
    if (counts_ok_ && static_cast<int64_t>(used.size()) != s_.devices)
      diags_.error(sloc("devices"), "the summary says devices: " + std::to_string(s_.devices) + " but the stages use " +
                                        std::to_string(used.size()) + " distinct devices");
  }

  // Stages on different device groups share no device; under interleaving, stage i runs on exactly the devices
  // of stage i % pipeline_stages (Megatron's layout, as the schedule generator assumes).
  void check_sharing(bool layout_ok) {
    const int P = s_.pipeline_stages;
    bool chunks = layout_ok && interleaved();
    std::map<int, size_t> owner;  // device -> first stage (group) holding it
    for (size_t i = 0; i < plan_.stages.size(); ++i) {
      const StagePlan& st = plan_.stages[i];
      if (chunks && static_cast<int>(i) >= P) {
        const StagePlan& home = plan_.stages[i % static_cast<size_t>(P)];
        if (st.devices != home.devices || st.mesh != home.mesh)
          diags_.error(stage_loc(st, "devices"),
                       "stage " + std::to_string(i) + " is chunk " + std::to_string(static_cast<int>(i) / P) +
                           " of device group " + std::to_string(i % static_cast<size_t>(P)) +
                           " and must run on the devices and mesh of stage " + std::to_string(i % static_cast<size_t>(P)) +
                           ": devices " + list_str(home.devices) + ", mesh " + list_str(home.mesh),
                       "under interleaving, stage i runs on the devices of stage i % pipeline_stages");
        continue;
      }
      for (size_t k = 0; k < st.devices.size(); ++k) {
        int d = st.devices[k];
        auto [it, fresh] = owner.emplace(d, i);
        if (fresh || it->second == i) continue;
        diags_.error(device_loc(st, k),
                     "device " + std::to_string(d) + " is in stage " + std::to_string(it->second) + " and in stage " +
                         std::to_string(i),
                     interleaved() ? "under interleaving, stage i runs on the devices of stage i % pipeline_stages; "
                                     "other stages use disjoint devices"
                                   : "a device holds one stage; several stages per device need schedule: interleaved");
      }
    }
  }

  // ---- 3. stage layer ranges --------------------------------------------------------------------------------
  std::optional<int> layer_index(const StagePlan& st, const std::string& key, const std::string& name, size_t i) {
    auto it = index_.find(name);
    if (it != index_.end()) return it->second;
    diags_.error(stage_loc(st, key),
                 "stage " + std::to_string(i) + "'s " + key + " " + q(name) + " is not a layer of the model",
                 did_you_mean_hint(name, names_));
    return std::nullopt;
  }

  std::string span(int a, int b) const {
    return a == b ? "layer " + q(names_[a]) + " is" : "layers " + q(names_[a]) + " to " + q(names_[b]) + " are";
  }

  void check_stage_ranges() {
    if (plan_.stages.empty() || fwd_.empty()) return;
    int next = 0;       // the index the next stage must start at
    bool known = true;  // false after a bad name or range: where the next stage should start is unclear
    stage_of_.assign(fwd_.size(), -1);
    bool ranges_ok = true;
    for (size_t i = 0; i < plan_.stages.size(); ++i) {
      const StagePlan& st = plan_.stages[i];
      std::string who = "stage " + std::to_string(i);
      auto a = layer_index(st, "first_layer", st.first_layer, i);
      auto b = layer_index(st, "last_layer", st.last_layer, i);
      if (!a || !b) {
        ranges_ok = false;
        known = b.has_value();
        next = b ? *b + 1 : 0;
        continue;
      }
      if (*a > *b) {
        diags_.error(stage_loc(st, "last_layer"),
                     who + " ends at " + q(st.last_layer) + ", which comes before its first layer " +
                         q(st.first_layer),
                     "layer ranges follow the model's order: first_layer, then last_layer");
        ranges_ok = false;
        known = false;
        continue;
      }
      if (known && *a > next) {
        diags_.error(stage_loc(st, "first_layer"),
                     span(next, *a - 1) + " in no stage: " + who + " starts at " + q(st.first_layer) +
                         (i == 0 ? "" : " but stage " + std::to_string(i - 1) + " ends at " + q(names_[next - 1])),
                     "start " + who + " at " + q(names_[next]));
        ranges_ok = false;
      } else if (known && *a < next) {
        diags_.error(stage_loc(st, "first_layer"),
                     who + " starts at " + q(st.first_layer) + ", which stage " + std::to_string(i - 1) +
                         " already holds (it ends at " + q(names_[next - 1]) + ")",
                     next < static_cast<int>(names_.size()) ? "start " + who + " at " + q(names_[next])
                                                             : "stage " + std::to_string(i - 1) + " ends at the last layer");
        ranges_ok = false;
      }
      for (int k = *a; k <= *b; ++k) stage_of_[k] = static_cast<int>(i);
      next = *b + 1;
      known = true;
    }
    int last = static_cast<int>(names_.size()) - 1;
    if (known && next <= last) {
      const StagePlan& st = plan_.stages.back();
      diags_.error(stage_loc(st, "last_layer"),
                   span(next, last) + " in no stage: the last stage ends at " + q(st.last_layer),
                   "end stage " + std::to_string(plan_.stages.size() - 1) + " at " + q(names_[last]));
      ranges_ok = false;
    }
    if (!ranges_ok) stage_of_.clear();
  }

  // ---- 4. layer entries ------------------------------------------------------------------------------------
  // Activation recomputation modes (docs/plan_file.md).
  void check_recompute(const std::string& mode, const SourceLoc& at, const std::string& where) {
    static const std::vector<std::string> kModes = {"none", "full", "selective"};
    if (std::find(kModes.begin(), kModes.end(), mode) != kModes.end()) return;
    std::string hint = did_you_mean_hint(mode, kModes);
    diags_.error(at, "unknown recompute mode " + q(mode) + " " + where + "; expected none, full or selective",
                 hint.empty() ? "full: recompute the layer's block from its input in backward; selective: only its "
                                "cheap ops (normalisations, activations)"
                              : hint);
  }

  void check_layers() {
    std::map<std::string, const LayerPlan*> seen;
    int64_t max_tp = 1;
    for (const LayerPlan& l : plan_.layers) {
      max_tp = std::max<int64_t>(max_tp, l.tensor_parallel);
      if (!l.recompute.empty()) check_recompute(l.recompute, layer_loc(l, "recompute"), "of layer " + q(l.layer));
      auto it = index_.find(l.layer);
      if (it == index_.end()) {
        diags_.error(layer_loc(l, "layer"), "the model has no layer " + q(l.layer), did_you_mean_hint(l.layer, names_));
        continue;
      }
      auto [prev, fresh] = seen.emplace(l.layer, &l);
      if (!fresh) {
        std::string first = prev->second->loc.str();
        diags_.error(layer_loc(l, "layer"), "layer " + q(l.layer) + " has two entries",
                     first.empty() ? "" : "the first is at " + first);
        continue;
      }
      check_layer(l, *fwd_[it->second], it->second);
    }
    if (counts_ok_ && s_.tensor_parallel != max_tp)
      diags_.error(sloc("tensor_parallel"),
                   "the summary says tensor_parallel: " + std::to_string(s_.tensor_parallel) +
                       " but the largest tensor_parallel of any layer is " + std::to_string(max_tp),
                   "layers without an entry have tensor_parallel 1, e.g. - {layer: h.0.fc, signature: column, "
                   "tensor_parallel: 2}");
  }

  void check_layer(const LayerPlan& l, const graph::Node& n, int idx) {
    std::string who = "layer " + q(l.layer) + " (" + n.op->name + ")";
    // The signature: one of those the op offers for the layer's shapes.
    std::vector<TensorDesc> in, out;
    for (ValueId v : n.inputs) in.push_back(g_.value(v).desc);
    for (ValueId v : n.outputs) out.push_back(g_.value(v).desc);
    std::vector<ops::SplitSignature> sigs;
    try {
      sigs = n.op->splits ? n.op->splits(n.attrs, in, out) : ops::all_broadcast(in, out);
    } catch (const ops::OpError& e) {
      diags_.error(layer_loc(l, "signature"), who + ": " + e.what(), e.hint());
      return;
    }
    const ops::SplitSignature* sig = nullptr;
    std::vector<std::string> offered;
    for (const auto& s : sigs) {
      offered.push_back(s.name);
      if (s.name == l.signature) sig = &s;
    }
    if (!sig) {
      std::string hint = did_you_mean_hint(l.signature, offered);
      diags_.error(layer_loc(l, "signature"),
                   who + " has no split signature " + q(l.signature) + "; it offers: " + join(offered), hint);
    }
    // The tensor group: tensor_parallel divides the stage's mesh beside its data-parallel axis.
    if (l.tensor_parallel < 1) {
      diags_.error(layer_loc(l, "tensor_parallel"),
                   "tensor_parallel of " + q(l.layer) + " must be at least 1, got " + std::to_string(l.tensor_parallel));
      return;
    }
    if (stage_of_.empty()) return;
    size_t si = static_cast<size_t>(stage_of_[static_cast<size_t>(idx)]);
    const StagePlan& st = plan_.stages[si];
    if (st.mesh.empty()) return;
    int64_t group = 1;
    for (size_t k = 1; k < st.mesh.size(); ++k) group *= std::max<int64_t>(1, st.mesh[k]);
    if (group % l.tensor_parallel != 0) {
      std::vector<std::string> ok;
      for (int64_t d : divisors(group)) ok.push_back(std::to_string(d));
      diags_.error(layer_loc(l, "tensor_parallel"),
                   "tensor_parallel " + std::to_string(l.tensor_parallel) + " of " + q(l.layer) +
                       " does not divide the tensor group of stage " + std::to_string(si) + " (mesh " +
                       list_str(st.mesh) + ": " + std::to_string(group) + " device" + (group == 1 ? "" : "s") +
                       " beside the data-parallel axis)",
                   "valid: " + join(ok));
      return;
    }
    if (sig && l.tensor_parallel > 1 && counts_ok_) check_even(l, n, *sig, who);
  }

  // ---- 5. shared (tied) parameters ---------------------------------------------------------------------------
  // How layer `idx` holds parameter value v (as exec/lower.cpp stores it): S(axis) where its signature splits it,
  // else whole (B).
  ops::Sbp stored_layout(int idx, ValueId v, const std::map<std::string, const LayerPlan*>& entries) const {
    auto e = entries.find(names_[static_cast<size_t>(idx)]);
    if (e == entries.end() || e->second->tensor_parallel <= 1) return ops::Sbp::B();
    const graph::Node& n = *fwd_[static_cast<size_t>(idx)];
    std::vector<TensorDesc> in, out;
    for (ValueId x : n.inputs) in.push_back(g_.value(x).desc);
    for (ValueId x : n.outputs) out.push_back(g_.value(x).desc);
    try {
      for (const auto& sig : n.op->splits ? n.op->splits(n.attrs, in, out) : ops::all_broadcast(in, out))
        if (sig.name == e->second->signature)
          for (size_t k = 0; k < n.inputs.size() && k < sig.inputs.size(); ++k)
            if (n.inputs[k] == v && sig.inputs[k].kind == ops::Sbp::Kind::Split) return sig.inputs[k];
    } catch (const ops::OpError&) {
    }
    return ops::Sbp::B();
  }

  void check_shared_params() {
    if (stage_of_.empty()) return;
    std::map<std::string, const LayerPlan*> entries;
    for (const LayerPlan& l : plan_.layers) entries.emplace(l.layer, &l);
    for (const auto& p : g_.params()) {
      std::vector<int> users;  // forward layers using it, in model order
      for (NodeId c : g_.value(p.value).consumers) {
        auto it = index_.find(g_.node(c).layer);
        if (it != index_.end() && fwd_[static_cast<size_t>(it->second)]->id.idx() == c.idx()) users.push_back(it->second);
      }
      std::sort(users.begin(), users.end());
      if (users.size() < 2) continue;
      const int a = users.front();
      const std::string& first = names_[static_cast<size_t>(a)];
      const ops::Sbp held = stored_layout(a, p.value, entries);
      for (size_t k = 1; k < users.size(); ++k) {
        const int u = users[k];
        const std::string& name = names_[static_cast<size_t>(u)];
        const int sa = stage_of_[static_cast<size_t>(a)], su = stage_of_[static_cast<size_t>(u)];
        if (sa != su) {
          diags_.error(stage_loc(plan_.stages[static_cast<size_t>(su)], "first_layer"),
                       "layers " + q(first) + " (stage " + std::to_string(sa) + ") and " + q(name) + " (stage " +
                           std::to_string(su) + ") share the parameter " + q(p.name) + " (tie), which one stage must hold",
                       "put both layers in one stage: a tied parameter's gradients are summed within its stage");
          break;
        }
        const ops::Sbp mine = stored_layout(u, p.value, entries);
        if (!(mine == held)) {
          auto e = entries.count(name) ? entries.at(name) : entries.count(first) ? entries.at(first) : nullptr;
          diags_.error(e ? layer_loc(*e, "signature") : plan_.loc,
                       "layers " + q(first) + " and " + q(name) + " share the parameter " + q(p.name) +
                           " (tie) but hold it differently (" + held.str() + " and " + mine.str() + ")",
                       "give them signatures that hold it alike (an embedding's 'column' and a linear's 'row' both "
                       "split it by columns, S(1)), or replicate both");
          break;
        }
      }
    }
  }

  // Every S(axis) of the signature cuts its tensor into tensor_parallel equal parts.
  void check_even(const LayerPlan& l, const graph::Node& n, const ops::SplitSignature& sig, const std::string& who) {
    auto check = [&](ValueId v, const ops::Sbp& sbp) {
      if (sbp.kind != ops::Sbp::Kind::Split) return true;
      const graph::Value& val = g_.value(v);
      int axis = val.desc.shape.norm_axis(sbp.axis);
      if (axis < 0 || axis >= val.desc.shape.rank()) return true;
      bool batched = val.kind == graph::ValueKind::Input || val.kind == graph::ValueKind::Activation;
      int64_t size = batched && axis == 0 ? s_.micro_batch : val.desc.shape[axis];
      if (sbp.segmented()) {  // per part (attention's q, k and v rows): whole units (heads) of every part on each device
        if (sbp.splits_evenly(size, l.tensor_parallel)) return true;
        const std::string segs = std::to_string(sbp.seg[0]) + ", " + std::to_string(sbp.seg[1]) + " and " +
                                 std::to_string(sbp.seg[2]);
        diags_.error(layer_loc(l, "tensor_parallel"),
                     who + ": signature " + q(sig.name) + " splits " + q(val.name) + " " + val.desc.shape.str() +
                         " along axis " + std::to_string(axis) + " in parts of " + segs + " units (heads) each into " +
                         std::to_string(l.tensor_parallel) + " whole-unit chunks, which " +
                         std::to_string(l.tensor_parallel) + " does not divide",
                     "choose a tensor_parallel that divides each of " + segs +
                         " (attention: kv_heads, whose q heads stay with them)");
        return false;
      }
      if (size % l.tensor_parallel == 0) return true;
      std::string what = batched && axis == 0
                             ? "the micro-batch of " + std::to_string(size) + " samples"
                             : q(val.name) + " " + val.desc.shape.str() + " along axis " + std::to_string(axis) +
                                   " (size " + std::to_string(size) + ")";
      diags_.error(layer_loc(l, "tensor_parallel"),
                   who + ": signature " + q(sig.name) + " splits " + what + " into " +
                       std::to_string(l.tensor_parallel) + " unequal parts",
                   "choose a tensor_parallel that divides " + std::to_string(size));
      return false;
    };
    for (size_t k = 0; k < sig.inputs.size() && k < n.inputs.size(); ++k)
      if (!check(n.inputs[k], sig.inputs[k])) return;
    for (size_t k = 0; k < sig.outputs.size() && k < n.outputs.size(); ++k)
      if (!check(n.outputs[k], sig.outputs[k])) return;
  }

  const Plan& plan_;
  const Summary& s_;
  const graph::Graph& g_;
  int64_t batch_;
  const DeviceSpec& spec_;
  Diagnostics& diags_;
  std::vector<const graph::Node*> fwd_;
  std::map<std::string, int> index_;
  std::vector<std::string> names_;
  std::vector<int> stage_of_;  // forward layer index -> stage; empty when the ranges are wrong
  bool counts_ok_ = true;   // every summary count is at least 1
  bool virtual_ok_ = true;  // virtual_stages suits the schedule
};

}  // namespace

void validate_plan(const Plan& plan, const graph::Graph& g, int64_t global_batch, const DeviceSpec& devices,
                   Diagnostics& diags) {
  Validator(plan, g, global_batch, devices, diags).run();
}

}  // namespace braid::planner
