// predict(): a complete plan's step time and memory (docs/planner.md, "Cost model"), stage by stage.
#include "planner/evaluate.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>

#include "planner/layer_cost.h"

namespace braid::planner {

int optimizer_states(const std::string& type, double momentum) {
  if (type == "adamw" || type == "adam") return 2;
  return momentum != 0 ? 1 : 0;
}

void apply_precision(TrainSettings& ts, const std::string& precision, bool accelerator) {
  ts.compute = DType::f32;
  ts.master_bytes = 0;
  if (!accelerator) return;
  if (precision == "bf16") ts.compute = DType::bf16;
  else if (precision == "f16") ts.compute = DType::f16;
  else return;
  ts.master_bytes = 4;
}

double fp32_param_bytes(double param_bytes, const TrainSettings& ts) {
  return param_bytes * 4.0 / static_cast<double>(dtype_size(ts.compute));
}

ModelStates model_states(double param_bytes, const TrainSettings& ts, int zero, int dp) {
  ModelStates s;
  const double count = param_bytes / static_cast<double>(dtype_size(ts.compute));
  const double shard = zero >= 1 && dp > 1 ? 1.0 / dp : 1.0;
  s.weights = param_bytes * (zero >= 3 ? shard : 1.0);
  s.grads = param_bytes * (zero >= 2 ? shard : 1.0);
  s.optimizer = count * (4.0 * ts.optimizer_states + ts.master_bytes) * shard;
  return s;
}

int in_flight(const std::string& schedule, int k, int p, int v, int64_t m) {
  if (schedule == "gpipe") return static_cast<int>(m);
  if (schedule == "interleaved" && v > 1) {
    // Megatron's interleaved 1F1B: device d runs (p - d - 1) * 2 + (v - 1) * p warm-up forwards, then one
    // more, across its v chunks; each chunk holds its share.
    int d = k % p;
    int64_t forwards = std::min<int64_t>(m * v, static_cast<int64_t>(p - d - 1) * 2 + static_cast<int64_t>(v - 1) * p + 1);
    return static_cast<int>((forwards + v - 1) / v);
  }
  return static_cast<int>(std::min<int64_t>(m, p - k));
}

void dp_sync(const CostModel& m, const Group& g, double param_bytes, double backward_s, double bucket_bytes,
             double* total, double* exposed) {
  *total = *exposed = 0;
  if (g.size <= 1 || param_bytes <= 0) return;
  double buckets = std::ceil(param_bytes / bucket_bytes);
  double last_bytes = param_bytes - (buckets - 1) * bucket_bytes;
  double last = m.grad_sync_time(last_bytes, g);
  *total = (buckets - 1) * m.grad_sync_time(bucket_bytes, g) + last;
  *exposed = std::max(*total - backward_s, last);
}

ZeroCommParts zero_comm_parts(const CostModel& m, const Group& g, double param_bytes, int tensors, double bucket_bytes,
                              int zero) {
  ZeroCommParts z;
  z.zero = zero;
  if (g.size <= 1 || param_bytes <= 0) return z;
  z.none = false;
  // One collective per parameter tensor: n times the figure of a tensor of the average size (n latencies, the bytes
  // once).
  const double n = std::max(1, tensors);
  auto per_tensor = [&](Collective c) { return n * m.collective_time(c, param_bytes / n, g); };
  if (zero <= 1) {
    const double buckets = std::ceil(param_bytes / bucket_bytes);
    const double last_bytes = param_bytes - (buckets - 1) * bucket_bytes;
    z.last = m.grad_sync_time(last_bytes, g);
    z.overlapped = (buckets - 1) * m.grad_sync_time(bucket_bytes, g) + z.last;
    z.total = z.overlapped;
    if (zero == 1) {
      z.gather = per_tensor(Collective::AllGather);
      z.total += z.gather;
    }
    return z;
  }
  z.mb_scatter = per_tensor(Collective::ReduceScatter);
  if (zero == 2) z.gather = per_tensor(Collective::AllGather);
  else z.mb_gather = per_tensor(Collective::AllGather);
  z.total = z.gather;
  return z;
}

void zero_sync(const ZeroCommParts& z, double backward_s, double* total, double* exposed) {
  *total = *exposed = 0;
  if (z.none) return;
  *total = z.total;
  *exposed = std::max(z.overlapped - backward_s, z.last) + z.gather;
}

double zero_micro_batch_comm(const ZeroCommParts& z) {
  if (z.zero < 2 || z.none) return 0;
  return z.mb_scatter + 2 * z.mb_gather;
}

void zero_sync(const CostModel& m, const Group& g, double param_bytes, int tensors, double backward_s,
               double bucket_bytes, int zero, double* total, double* exposed) {
  zero_sync(zero_comm_parts(m, g, param_bytes, tensors, bucket_bytes, zero), backward_s, total, exposed);
}

double zero_micro_batch_comm(const CostModel& m, const Group& g, double param_bytes, int tensors, int zero) {
  if (zero < 2) return 0;
  return zero_micro_batch_comm(zero_comm_parts(m, g, param_bytes, tensors, 0, zero));
}

double shared_speed(int busy, int devices, int cores) {
  if (cores <= 0 || busy <= 0) return 1;
  devices = std::max(1, devices);
  double threads = std::max(1, cores / devices);
  double all = std::min(1.0, cores / (devices * threads));
  double now = std::min(1.0, cores / (std::max(1, busy) * threads));
  return std::max(1.0, now / all);
}

namespace {

struct Step {
  bool forward;
  int stage;
  int mb;
};

// Compute order per pipeline device, as exec/schedule.cpp's generators (gpipe, one_f_one_b,
// interleaved_1f1b) emit it.
std::vector<std::vector<Step>> compute_order(const std::string& schedule, int D, int v, int M) {
  std::vector<std::vector<Step>> order(static_cast<size_t>(D));
  if (schedule == "interleaved" && v > 1) {
    const int total = v * M, group = D * v;
    auto chunk_step = [&](int r, int k, bool forward) {
      int chunk = (k % group) / D;
      if (!forward) chunk = v - 1 - chunk;
      return Step{forward, chunk * D + r, (k / group) * D + k % D};
    };
    for (int r = 0; r < D; ++r) {
      auto& o = order[static_cast<size_t>(r)];
      const int warmup = M == D ? total : std::min((D - r - 1) * 2 + (v - 1) * D, total);
      for (int k = 0; k < warmup; ++k) o.push_back(chunk_step(r, k, true));
      for (int k = 0; k + warmup < total; ++k) {
        o.push_back(chunk_step(r, warmup + k, true));
        o.push_back(chunk_step(r, k, false));
      }
      for (int k = total - warmup; k < total; ++k) o.push_back(chunk_step(r, k, false));
    }
    return order;
  }
  for (int d = 0; d < D; ++d) {
    auto& o = order[static_cast<size_t>(d)];
    if (schedule == "gpipe") {
      for (int mb = 0; mb < M; ++mb) o.push_back({true, d, mb});
      for (int mb = 0; mb < M; ++mb) o.push_back({false, d, mb});
      continue;
    }
    const int warmup = std::min(D - d - 1, M);
    for (int mb = 0; mb < warmup; ++mb) o.push_back({true, d, mb});
    for (int k = 0; k + warmup < M; ++k) {
      o.push_back({true, d, warmup + k});
      o.push_back({false, d, k});
    }
    for (int mb = M - warmup; mb < M; ++mb) o.push_back({false, d, mb});
  }
  return order;
}

}  // namespace

bool simulates(const Cluster& c) { return c.host_cores > 0 || !c.busy_speed.empty(); }

std::vector<double> busy_speeds(const Cluster& c) {
  const int n = std::max(1, c.devices());
  std::vector<double> speed(static_cast<size_t>(n) + 1, 1.0);
  for (int b = 1; b <= n; ++b)
    speed[static_cast<size_t>(b)] = static_cast<int>(c.busy_speed.size()) == n ? c.busy_speed[static_cast<size_t>(b) - 1]
                                                                                : shared_speed(b, n, c.host_cores);
  return speed;
}

double simulate_pipeline(const std::string& schedule, int p, int v, int64_t m64, const std::vector<StageWork>& stages,
                         int devices, int cores) {
  devices = std::max(1, devices);
  std::vector<double> speed(static_cast<size_t>(devices) + 1);
  for (int b = 0; b <= devices; ++b) speed[static_cast<size_t>(b)] = shared_speed(b, devices, cores);
  return simulate_pipeline(schedule, p, v, m64, stages, speed);
}

double simulate_pipeline(const std::string& schedule, int p, int v, int64_t m64, const std::vector<StageWork>& stages,
                         const std::vector<double>& speed) {
  const int M = static_cast<int>(m64), S = static_cast<int>(stages.size());
  if (p < 1 || M < 1 || S != p * std::max(1, v)) throw InternalError("simulate_pipeline: inconsistent shape");
  auto order = compute_order(schedule, p, std::max(1, v), M);
  // done[(stage, mb, forward)]
  std::vector<char> fdone(static_cast<size_t>(S) * M, 0), bdone(static_cast<size_t>(S) * M, 0);
  auto at = [&](int s, int mb) { return static_cast<size_t>(s) * M + mb; };
  std::vector<size_t> pc(static_cast<size_t>(p), 0);
  std::vector<int> phase(static_cast<size_t>(p), 0);  // 0 waiting, 1 computing, 2 communicating
  std::vector<double> left(static_cast<size_t>(p), 0);
  double now = 0;
  auto finish = [&](int d) {
    const Step& st = order[static_cast<size_t>(d)][pc[static_cast<size_t>(d)]];
    (st.forward ? fdone : bdone)[at(st.stage, st.mb)] = 1;
    ++pc[static_cast<size_t>(d)];
    phase[static_cast<size_t>(d)] = 0;
  };
  for (;;) {
    // Start (and pass through zero-length phases of) every device whose next step is ready.
    bool changed = true;
    while (changed) {
      changed = false;
      for (int d = 0; d < p; ++d) {
        size_t du = static_cast<size_t>(d);
        if (phase[du] == 0 && pc[du] < order[du].size()) {
          const Step& st = order[du][pc[du]];
          bool ready = st.forward ? (st.stage == 0 || fdone[at(st.stage - 1, st.mb)])
                                  : (fdone[at(st.stage, st.mb)] && (st.stage + 1 == S || bdone[at(st.stage + 1, st.mb)]));
          if (!ready) continue;
          const StageWork& w = stages[static_cast<size_t>(st.stage)];
          phase[du] = 1;
          left[du] = st.forward ? w.forward_compute_s : w.backward_compute_s;
          changed = true;
        }
        if (phase[du] == 1 && left[du] <= 0) {
          const Step& st = order[du][pc[du]];
          const StageWork& w = stages[static_cast<size_t>(st.stage)];
          phase[du] = 2;
          left[du] = st.forward ? w.forward_comm_s : w.backward_comm_s;
          changed = true;
        }
        if (phase[du] == 2 && left[du] <= 0) finish(d), changed = true;
      }
    }
    int busy = 0;
    bool active = false;
    for (int d = 0; d < p; ++d) {
      size_t du = static_cast<size_t>(d);
      if (phase[du] == 1) busy += stages[static_cast<size_t>(order[du][pc[du]].stage)].devices;
      active |= phase[du] != 0;
    }
    if (!active) {
      for (int d = 0; d < p; ++d)
        if (pc[static_cast<size_t>(d)] < order[static_cast<size_t>(d)].size())
          throw InternalError("simulate_pipeline: the " + schedule + " order deadlocks");
      return now;
    }
    const double rate = speed[static_cast<size_t>(std::clamp(busy, 0, static_cast<int>(speed.size()) - 1))];
    double dt = std::numeric_limits<double>::infinity();
    for (int d = 0; d < p; ++d) {
      size_t du = static_cast<size_t>(d);
      if (phase[du] == 1) dt = std::min(dt, left[du] / rate);
      if (phase[du] == 2) dt = std::min(dt, left[du]);
    }
    now += dt;
    for (int d = 0; d < p; ++d) {
      size_t du = static_cast<size_t>(d);
      if (phase[du] == 0) continue;
      double t = phase[du] == 1 ? left[du] / rate : left[du];
      // The step(s) ending now end exactly (no rounding residue left behind).
      left[du] = t <= dt * (1 + 1e-12) ? 0 : left[du] - (phase[du] == 1 ? dt * rate : dt);
    }
  }
}

namespace {

struct StageShape {
  int dp = 1, tp = 1;
  Group tensor_group, dp_group;
};

StageShape stage_shape(const StagePlan& st, const Cluster& c) {
  StageShape s;
  s.dp = st.mesh.empty() ? 1 : static_cast<int>(st.mesh[0]);
  s.tp = static_cast<int>(st.devices.size()) / std::max(1, s.dp);
  std::vector<int> tg(st.devices.begin(), st.devices.begin() + std::min<size_t>(st.devices.size(), static_cast<size_t>(s.tp)));
  std::vector<int> dg;
  for (int r = 0; r < s.dp; ++r) dg.push_back(st.devices[static_cast<size_t>(r * s.tp)]);
  s.tensor_group = group_of(c, tg);
  s.dp_group = group_of(c, dg);
  return s;
}

}  // namespace

StepPrediction predict(const Plan& plan_in, const graph::Graph& g, const CostModel& model, const TrainSettings& ts) {
  Plan plan = plan_in;
  add_default_layers(plan, g);
  const Summary& sum = plan.summary;
  const Cluster& cl = model.cluster();
  std::map<std::string, const LayerPlan*> entry;
  for (const auto& l : plan.layers) entry.emplace(l.layer, &l);
  auto fwd = forward_layers(g);
  std::map<std::string, int> index;
  for (size_t i = 0; i < fwd.size(); ++i) index[fwd[i]->layer] = static_cast<int>(i);

  StepPrediction r;
  const int nst = static_cast<int>(plan.stages.size());
  const int v = std::max(1, sum.virtual_stages);
  const int p = std::max(1, nst / v);
  r.memory_limit_bytes = cl.device.memory_bytes / v;
  // Stage of every layer, and the first layer of every stage.
  std::vector<int> stage_of(fwd.size(), -1), first(static_cast<size_t>(nst) + 1, static_cast<int>(fwd.size()));
  for (int s = 0; s < nst; ++s) {
    int a = index.at(plan.stages[static_cast<size_t>(s)].first_layer), b = index.at(plan.stages[static_cast<size_t>(s)].last_layer);
    first[static_cast<size_t>(s)] = a;
    for (int i = a; i <= b; ++i) stage_of[static_cast<size_t>(i)] = s;
  }
  std::map<std::pair<int, std::pair<int, int>>, std::unique_ptr<LayerCosts>> costs;
  auto costs_for = [&](const StageShape& sh) -> const LayerCosts& {
    auto key = std::make_pair(sh.tp, std::make_pair(sh.tensor_group.size, sh.tensor_group.nodes));
    auto& c = costs[key];
    if (!c) c = std::make_unique<LayerCosts>(g, model, sum.micro_batch, sh.tp, sh.tensor_group, ts.compute,
                                                ts.head_parallel_attention);
    return *c;
  };
  // Bytes crossing the cut before layer `at` (values made before it and used at or after it), layout B.
  auto cut_bytes = [&](const LayerCosts& lc, int at) {
    double bytes = 0;
    if (at <= 0 || at >= static_cast<int>(fwd.size())) return bytes;
    for (int i = 0; i < at; ++i)
      for (ValueId out : fwd[static_cast<size_t>(i)]->outputs) {
        bool used = false;
        for (NodeId c : g.value(out).consumers) used |= lc.layer_of(c) >= at;
        if (used) bytes += lc.value_bytes(out);
      }
    return bytes;
  };

  double max_t = 0, sum_t = 0, max_tail = 0, model_flops = 0;
  double tail_comm = 0;  // of max_tail: the exposed gradient sync (the rest, optimizer and weights, computes)
  size_t busiest = 0;
  std::vector<double> device_memory(static_cast<size_t>(p), 0);
  std::vector<StageWork> works;
  for (int s = 0; s < nst; ++s) {
    const StagePlan& st = plan.stages[static_cast<size_t>(s)];
    StageShape sh = stage_shape(st, cl);
    const LayerCosts& lc = costs_for(sh);
    StagePrediction sp;
    StageWork work;
    work.devices = static_cast<int>(st.devices.size());
    int a = first[static_cast<size_t>(s)], b = first[static_cast<size_t>(s) + 1];
    std::map<ValueId, Layout> layout;
    double buf = 0, tp_comm = 0, largest_param = 0;
    // Recomputation (docs/planner.md, "Memory"): per layer its mode, its option's activations and its forward
    // (compute and the reshards into it), to adjust once the stage's layers are known.
    struct Rc {
      std::string mode, block;
      double act = 0, fwd = 0, grad = 0;
      bool cheap = false;
    };
    std::vector<Rc> rc;
    for (int i = a; i < b; ++i) {
      const graph::Node& n = *fwd[static_cast<size_t>(i)];
      const LayerPlan* lp = entry.at(n.layer);
      int k = lc.find(i, lp->signature, lp->tensor_parallel);
      if (k < 0)
        throw UserError(lp->loc, "layer '" + n.layer + "' (" + n.op->name + ") has no option '" + lp->signature +
                                     "' with tensor_parallel " + std::to_string(lp->tensor_parallel) + " in stage " +
                                     std::to_string(s));
      const LayerOption& o = lc.options(i)[static_cast<size_t>(k)];
      Rc r1;
      r1.mode = recompute_of(plan, n.layer);
      const size_t dot = n.layer.rfind('.');
      r1.block = dot == std::string::npos ? std::string() : n.layer.substr(0, dot);
      r1.act = o.act_bytes;
      r1.grad = o.grad_bytes;
      r1.fwd = o.forward_s;
      r1.cheap = o.cheap;
      for (int q = 0; q < n.num_data_inputs; ++q) {
        ValueId in = n.inputs[static_cast<size_t>(q)];
        auto it = layout.find(in);
        Reshard rs = lc.reshard(in, it == layout.end() ? kLayoutB : it->second, o.in[static_cast<size_t>(q)]);
        r1.fwd += rs.forward_s;
        sp.forward_s += rs.forward_s;
        sp.backward_s += rs.backward_s;
        tp_comm += rs.forward_s + rs.backward_s;
        buf = std::max(buf, rs.buffer_bytes);
      }
      for (size_t q = 0; q < n.outputs.size(); ++q) layout[n.outputs[q]] = o.out[q];
      sp.forward_s += o.forward_s;
      sp.backward_s += o.backward_s;
      sp.compute_s += o.forward_s + o.backward_s - o.grad_sync_s;
      work.forward_compute_s += o.forward_s;
      work.backward_compute_s += o.backward_s - o.grad_sync_s;
      tp_comm += o.grad_sync_s;
      sp.param_bytes += o.param_bytes;
      sp.param_tensors += o.param_tensors;
      largest_param = std::max(largest_param, o.largest_param_bytes);
      sp.act_bytes += o.act_bytes;
      sp.flops += o.flops;
      buf = std::max(buf, o.workspace_bytes);
      sp.memory_bytes += o.buffer_bytes;
      model_flops += lc.options(i)[0].flops;
      rc.push_back(r1);
    }
    // selective: a cheap layer's outputs are dropped and its forward runs again in the backward; full: a group of
    // consecutive layers of one block (as lowering groups them) keeps only its inputs, runs its forward again in
    // the backward, and holds its activations meanwhile (a temporary).
    // The backward's activation gradients (LayerOption::grad_bytes) beyond what it has freed: walking the layers
    // forward, `excess` is the most any layer so far needs above the bytes kept after it (search_intervals.h
    // keeps Entry::e the same way: each kept byte added lowers it, each layer raises it to its own gradients).
    double excess = 0;
    auto keep = [&](double bytes, double grad) { excess = std::max(excess - bytes, grad); };
    for (size_t k = 0; k < rc.size();) {
      if (rc[k].mode == "selective" && rc[k].cheap) {
        sp.act_bytes -= rc[k].act;
        sp.recompute_s += rc[k].fwd;
        keep(0, rc[k].grad);
      }
      if (rc[k].mode != "full") {
        if (!(rc[k].mode == "selective" && rc[k].cheap)) keep(rc[k].act, rc[k].grad);
        ++k;
        continue;
      }
      size_t e = k + 1;
      while (e < rc.size() && rc[e].mode == "full" && rc[e].block == rc[k].block) ++e;
      double act = 0, fwd = 0;
      const double inputs = lc.group_input_bytes(a + static_cast<int>(k), a + static_cast<int>(e));
      excess -= inputs;
      for (size_t q = k; q < e; ++q) act += rc[q].act, fwd += rc[q].fwd, keep(0, rc[q].grad);
      sp.act_bytes += inputs - act;
      sp.recompute_s += fwd;
      buf = std::max(buf, act);
      k = e;
    }
    sp.grad_transient_bytes = std::max(0.0, excess);
    sp.backward_s += sp.recompute_s;
    work.backward_compute_s += sp.recompute_s;
    sp.compute_s += sp.recompute_s;
    // The runner's own costs of one micro-batch on this stage (calibrated cpu:N; 0 otherwise): instruction
    // hand-offs, half with the forward and half with the backward, and adding the gradients into the
    // accumulated ones (computing: shared cores slow it like the ops).
    const double hand_off = model.micro_batch_overhead(nst > 1);
    const double accumulate = model.grad_accumulate_time(sp.param_bytes);
    // In a pipeline on shared cores, each forward and backward first refills the core's caches (computing).
    const double turn = nst > 1 ? model.switch_time(sp.param_bytes) : 0;
    sp.turn_s = turn;
    sp.forward_s += hand_off / 2 + turn / 2;
    sp.backward_s += hand_off / 2 + accumulate + turn / 2;
    sp.compute_s += accumulate + turn;
    work.forward_compute_s += turn / 2;
    work.backward_compute_s += accumulate + turn / 2;
    // Values leaving the stage are sent whole (B); the stage reshards them first.
    for (int i = a; i < b; ++i)
      for (ValueId out : fwd[static_cast<size_t>(i)]->outputs) {
        bool leaves = false;
        for (NodeId c : g.value(out).consumers) leaves |= lc.layer_of(c) >= b;
        if (!leaves) continue;
        Reshard rs = lc.reshard(out, layout.at(out), kLayoutB);
        sp.forward_s += rs.forward_s;
        sp.backward_s += rs.backward_s;
        tp_comm += rs.forward_s + rs.backward_s;
        buf = std::max(buf, rs.buffer_bytes);
      }
    // Point to point: activations to the next stage, gradients to the previous one.
    double in_bytes = s > 0 ? cut_bytes(lc, a) : 0, out_bytes = s + 1 < nst ? cut_bytes(lc, b) : 0;
    if (s + 1 < nst && out_bytes > 0) {
      const StagePlan& nx = plan.stages[static_cast<size_t>(s) + 1];
      double t = model.p2p_time(out_bytes, cl.node_of(st.devices[0]) != cl.node_of(nx.devices[0]));
      sp.forward_s += t;
      tp_comm += t;
    }
    if (s > 0 && in_bytes > 0) {
      const StagePlan& pv = plan.stages[static_cast<size_t>(s) - 1];
      double t = model.p2p_time(in_bytes, cl.node_of(st.devices[0]) != cl.node_of(pv.devices[0]));
      sp.backward_s += t;
      tp_comm += t;
    }
    const int zero = sh.dp > 1 ? sum.zero : 0;
    // ZeRO 2 / 3: each micro-batch's gradient reduce-scatter (and weight all-gathers) beyond what its forward and
    // backward hide (the search adds the same to its stage figures).
    sp.zero_comm_s = zero_micro_batch_comm(model, sh.dp_group, sp.param_bytes, sp.param_tensors, zero);
    sp.backward_s += sp.zero_comm_s;
    tp_comm += sp.zero_comm_s;
    sp.comm_s = tp_comm;
    work.forward_comm_s = std::max(0.0, sp.forward_s - work.forward_compute_s);
    work.backward_comm_s = std::max(0.0, sp.backward_s - work.backward_compute_s);
    works.push_back(work);
    sp.act_bytes += in_bytes;
    zero_sync(model, sh.dp_group, sp.param_bytes, sp.param_tensors, sp.backward_s, ts.bucket_bytes, zero, &sp.dp_sync_s,
              &sp.dp_exposed_s);
    const double shard = zero >= 1 ? 1.0 / sh.dp : 1.0;
    sp.optimizer_s = model.optimizer_time(fp32_param_bytes(sp.param_bytes, ts) * shard, ts.optimizer_states) +
                     (ts.clip ? model.clip_time(sp.param_bytes) : 0);
    sp.in_flight = in_flight(sum.schedule, s, p, v, sum.micro_batches);
    sp.states = model_states(sp.param_bytes, ts, zero, sh.dp);
    sp.activation_bytes = sp.in_flight * sp.act_bytes;
    sp.gathered_bytes = zero >= 3 ? 2 * largest_param : 0;
    sp.memory_bytes += sp.states.total() + sp.activation_bytes + sp.grad_transient_bytes + sp.gathered_bytes + buf;
    r.fits &= sp.memory_bytes <= r.memory_limit_bytes;
    device_memory[static_cast<size_t>(s % p)] += sp.memory_bytes;
    if (sp.time() > max_t) max_t = sp.time(), busiest = static_cast<size_t>(s);
    sum_t += sp.time();
    sp.weight_read_s = model.weight_read_time(sp.param_bytes, ts.optimizer_states);
    if (sp.tail_s() > max_tail) max_tail = sp.tail_s(), tail_comm = sp.dp_exposed_s;
    r.stages.push_back(sp);
  }
  r.step_time_s = r.formula_step_time_s =
      pipeline_step(max_t, sum_t, max_tail, sum.micro_batches, v) + model.step_overhead();
  if (simulates(cl) && nst > 1)
    r.step_time_s = simulate_pipeline(sum.schedule, p, v, sum.micro_batches, works, busy_speeds(cl)) + max_tail +
                    model.step_overhead();
  r.tail_s = max_tail + model.step_overhead();
  for (double m : device_memory) r.peak_memory_bytes = std::max(r.peak_memory_bytes, m);
  if (!r.stages.empty()) {
    const StagePrediction& b = r.stages[busiest];
    double mv = static_cast<double>(sum.micro_batches) * v;
    // The tail's optimizer update and weight reads compute; its exposed gradient sync communicates.
    r.compute_s = mv * b.compute_s + (max_tail - tail_comm);
    r.comm_s = mv * b.comm_s + tail_comm;
    r.bubble_s = std::max(0.0, r.step_time_s - r.compute_s - r.comm_s);
    r.bound_by = !r.fits ? "memory"
                 : r.compute_s >= r.comm_s && r.compute_s >= r.bubble_s ? "compute"
                 : r.comm_s >= r.bubble_s ? "communication"
                                          : "bubble";
  }
  int devices = std::max(1, sum.devices);
  // model_flops: forward FLOPs of one micro-batch through every layer; dp x m of them per step.
  double micro_batches = static_cast<double>(sum.data_parallel) * sum.micro_batches;
  if (r.step_time_s > 0) r.tflops_per_device = 3 * model_flops * micro_batches / r.step_time_s / devices / 1e12;
  return r;
}

double predict_step_time(const Plan& plan, const graph::Graph& g, const CostModel& model, const TrainSettings& s) {
  return predict(plan, g, model, s).step_time_s;
}

void fill_predictions(Plan& plan, const graph::Graph& g, const CostModel& model, const TrainSettings& s) {
  StepPrediction r = predict(plan, g, model, s);
  plan.summary.predicted.step_time_s = r.step_time_s;
  plan.summary.predicted.tflops_per_device = r.tflops_per_device;
  plan.summary.predicted.peak_memory_gb = r.peak_memory_bytes / 1e9;
  plan.summary.predicted.bound_by = r.bound_by;
}

}  // namespace braid::planner
