// The cost model interface the planner searches with, and its three implementations: analytic (roofline of
// OpDef::cost on the cluster's peaks, alpha-beta collectives over the link hierarchy), calibrated (the same
// with per-op efficiencies and per-collective alpha/beta measured by `braid calibrate`) and a fake with
// plain linear figures for tests whose optimum is known. Formulas and sources: docs/planner.md.
// Invariants: every time is finite and >= 0 for finite inputs; the same inputs give the same numbers.
// Memory and pipeline formulas are not here: they follow from shapes and the plan (planner/evaluate.h).
#pragma once
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ops/op_def.h"
#include "planner/cluster.h"

namespace braid::planner {

enum class Collective { AllReduce, AllGather, ReduceScatter, AllToAll };
enum class Algorithm { Ring, Tree };
std::string to_string(Collective c);

// A communication group: `size` devices spread evenly over `nodes` nodes (nodes = 1: within one node).
struct Group {
  int size = 1;
  int nodes = 1;
};
// The group of these device ids on `c`.
Group group_of(const Cluster& c, std::span<const int> devices);

// alpha-beta time of one collective by one algorithm over the link hierarchy (docs/planner.md):
// ring all-reduce 2(n-1) alpha + 2(n-1)/n bytes / bw, tree all-reduce 2 ceil(log2 n) alpha + 2 bytes / bw,
// all-gather / reduce-scatter (n-1) alpha + (n-1)/n bytes / bw (bytes = the whole, gathered tensor),
// all-to-all (n-1) alpha + (n-1)/n bytes / bw. bw = intra-node bandwidth within a node, else
// min(intra, inter x devices of the group per node); alpha = the slower level's latency.
double alpha_beta_time(Collective c, Algorithm a, double bytes, const Group& g, const Link& intra, const Link& inter);

class CostModel {
 public:
  virtual ~CostModel() = default;
  virtual std::string name() const = 0;
  virtual const Cluster& cluster() const = 0;
  // Seconds for one device to run the op forward / its gradient on these local (per-device) shapes.
  virtual double forward_time(const ops::OpDef& op, const ops::Attrs& attrs, std::span<const TensorDesc> in,
                              std::span<const TensorDesc> out) const = 0;
  virtual double backward_time(const ops::OpDef& op, const ops::Attrs& attrs, std::span<const TensorDesc> in,
                               std::span<const TensorDesc> out) const = 0;
  // One collective over `bytes` (all-reduce, reduce-scatter: the whole tensor; all-gather: the gathered
  // result) on group `g`; the fastest algorithm where several apply. 0 for a group of one.
  virtual double collective_time(Collective c, double bytes, const Group& g) const = 0;
  // The data-parallel gradient all-reduce of `bytes` on `g`: an all-reduce, but of gradients the backward has
  // just written with the step's other data through the caches (calibrated: measured so; docs/planner.md).
  virtual double grad_sync_time(double bytes, const Group& g) const {
    return collective_time(Collective::AllReduce, bytes, g);
  }
  // One point-to-point message of `bytes` between two devices (cross_node: on different nodes).
  virtual double p2p_time(double bytes, bool cross_node) const = 0;
  // The optimizer's update of `param_bytes` of parameters holding `states` state tensors each.
  virtual double optimizer_time(double param_bytes, int states) const = 0;
  // The plan runner's own costs (docs/planner.md, "Runner costs"), measured by calibration on cpu:N; 0 in
  // the analytic and fake models. Per step: waking the devices, the loss / gradient-norm all-reduce, the
  // hand-back. Per micro-batch on one (virtual) stage: its instructions' hand-offs (pipelined: true when the
  // plan has more than one stage, so sends and receives wake the neighbours). Per backward of a stage
  // holding `param_bytes`: adding the micro-batch's gradients into the accumulated ones.
  virtual double step_overhead() const { return 0; }
  virtual double micro_batch_overhead(bool /*pipelined*/) const { return 0; }
  virtual double grad_accumulate_time(double /*param_bytes*/) const { return 0; }
  // Gradient-norm clipping of a device's `param_bytes` of gradients: the squared norm and the scaling.
  virtual double clip_time(double /*param_bytes*/) const { return 0; }
  // A device's first forward of a step packing its `param_bytes` of weights (holding `states` optimizer states
  // each) back from memory, where the step's working set left them (docs/planner.md, "Weights from memory"):
  // once per step and stage, with the optimizer's tail. 0 in the analytic and fake models, whose roofline counts
  // those bytes within each op's max(compute, memory).
  virtual double weight_read_time(double /*param_bytes*/, int /*states*/) const { return 0; }
  // In a pipeline whose devices share cores (more devices than the host's cores), a device holding
  // `param_bytes` refilling the core's caches after the device it shares the core with ran: per micro-batch,
  // half with the forward and half with the backward, as computation (docs/planner.md, "Turns on a core").
  // 0 in the analytic and fake models and wherever no core is shared.
  virtual double switch_time(double /*param_bytes*/) const { return 0; }
  // The scales a run's measurements put on this model's figures (Profile::Feedback; 1 and 1: none), so that a
  // run predicted with them and fed to `braid calibrate --from-run` again corrects the corrected figures.
  virtual double busy_scale() const { return 1; }
  virtual double tail_scale() const { return 1; }
};

// The share of `devices` devices' working sets of `per_device_bytes` each that half of a shared cache of
// `cache_bytes` holds (the step's activations and the rest take the other half): min(1, cache / 2 / total).
// The calibrated model's warm/cold optimizer and weight reads, and calibration's inverse of the latter, use it.
double cache_fraction(double cache_bytes, double per_device_bytes, int devices);
// An op's roofline time: max(flops / peak, bytes / b), b the cache bandwidth `cache_bw` where the op's bytes fit in
// `cache_share` (a device's half of its share of the last-level cache) and cache_bw > 0, else the memory
// bandwidth `bw`. Small ops run from cache: against the memory bandwidth their fitted efficiencies came out
// above 1 and jumped between decades (linear: 0.42, 1.61, 0.86 for 1e4, 1e5, 1e6 FLOPs; docs/planner.md).
double roofline(double flops, double bytes, double peak, double bw, double cache_bw, double cache_share);

// Measured figures: `braid calibrate` writes them (exec/calibrate.h), the calibrated model reads them.
struct Profile {
  std::string machine;        // "<cpu model> x <cores> cores"
  std::string braid_version;
  int devices = 0;            // cpu:N it was measured on
  CpuFigures cpu;             // peak / bandwidth figures of one logical device and the in-process links
  // op name -> shape class (the decade of the forward FLOPs, "1e7" for 10^7..10^8; see shape_class) ->
  // achieved fraction of peak. Between measured decades the model interpolates in log10(FLOPs).
  std::map<std::string, std::map<std::string, double>> efficiency;
  std::map<std::string, double> backward_ratio;  // op name -> backward time / forward time
  // collective name -> {alpha (s per step), beta (s per byte)} on the in-process backend
  std::map<std::string, std::pair<double, double>> collectives;
  // The optimizer's update, seconds per parameter byte, by state tensors per parameter (0: plain SGD,
  // 1: SGD with momentum, 2: AdamW), on N devices at once. Missing: the analytic memory-bound figure.
  // Cold: parameters, gradients and states come from memory (each worker displaces its share of the last-level
  // cache before the step). Warm: they were left in the cache by the step before (every worker's set fits).
  // The model mixes the two by how much of the N devices' optimizer working set fits in `cache_bytes`
  // (CostModel::optimizer_time; docs/planner.md, "Optimizer"). Warm missing: the cold figure throughout.
  std::map<int, double> optimizer_s_per_byte;
  std::map<int, double> optimizer_warm_s_per_byte;
  double cache_bytes = 0;  // the last-level cache the N devices share (0: unknown, the cold figure throughout)
  // Copy bandwidth of one device (of N at once) over a buffer in its half share of that cache (read + write bytes per
  // second); ops whose bytes fit there are measured and predicted against it (roofline above). 0: not measured
  // (profiles written before 2026-12-01: every op against the memory bandwidth).
  double cache_bandwidth = 0;
  // The first forward of a step, seconds per parameter byte it packs from memory, on top of the ops' fitted
  // figures (CostModel::weight_read_time, mixed by the cache like the optimizer). 0: not measured (profiles
  // written before 2026-12-01: the term is left out).
  double weight_s_per_byte = 0;
  // Devices sharing a core taking turns every pipeline chunk: the refill, all-busy seconds per byte a
  // micro-batch's forward and backward touch (CostModel::switch_time). 0: not measured, or no core shared.
  double switch_s_per_byte = 0;
  double clip_s_per_byte = 0;  // Engine's gradient norm and scaling, seconds per gradient byte (0: none)
  // Adding a micro-batch's gradients into the accumulated ones (exec::accumulate), seconds per gradient byte on
  // N devices at once. 0: not measured (the analytic memory-bound figure).
  double accumulate_s_per_byte = 0;
  // busy_speed[b - 1]: a device's compute speed while b of the N devices compute, relative to all N
  // computing (Cluster::busy_speed). Empty: not measured.
  std::vector<double> busy_speed;
  // Engine's own costs (CostModel::step_overhead, micro_batch_overhead): what a step of a tiny model
  // takes beyond the prediction without them. All 0: not measured.
  struct Runner {
    double step_overhead = 0;             // seconds per step
    double micro_batch_overhead = 0;      // seconds per micro-batch per stage, one stage
    double pipeline_micro_batch_overhead = 0;  // the same in a pipeline (sends, receives)
  } runner;
  // Runs' measurements fed back (`braid calibrate --devices cpu:N --from-run METRICS`; docs/planner.md,
  // "Feeding a run's measurements back"): per cpu:N planned, what the closed loop measured against what this
  // profile predicted. busy_scale multiplies what the devices' forward and backward of the micro-batches take
  // (compute, tensor-group collectives, sends, accumulation, turns: the closed loop's busy time), tail_scale
  // what follows the last backward once per step (exposed gradient sync, optimizer, clipping, weights from
  // memory, the runner's per-step cost). A fresh calibration starts without any.
  struct Feedback {
    int devices = 0;         // the N of the cpu:N runs measured; applied when planning that N only
    int records = 0;         // closed-loop records fitted
    double busy_scale = 1, tail_scale = 1;
  };
  std::vector<Feedback> feedback;
  const Feedback* feedback_for(int devices) const {
    for (const Feedback& f : feedback)
      if (f.devices == devices) return &f;
    return nullptr;
  }
};
// An op's size class by its forward FLOPs: the decade, "1eK" for 10^K <= flops < 10^(K+1) (K from 0 to 15).
std::string shape_class(double flops);
// An op's efficiency at `flops` from its measured classes: linear in log10(FLOPs) between the decades' centres,
// the nearest decade's figure beyond them, `fallback` when none is measured.
double class_efficiency(const std::map<std::string, double>& classes, double flops, double fallback);
std::string to_yaml(const Profile& p);
Profile parse_profile(const std::string& text, const std::string& path, Diagnostics& diags);

// Roofline: max(flops / (peak x compute_efficiency), bytes / (bandwidth x memory_efficiency)) + overhead
// per op; backward = backward_factor x forward. The figures are documented defaults (docs/planner.md).
struct AnalyticFigures {
  double compute_efficiency = 0.5;
  double memory_efficiency = 0.7;
  double op_overhead_s = 5e-6;
  double backward_factor = 2.0;
};
std::unique_ptr<CostModel> analytic_cost_model(const Cluster& c, const AnalyticFigures& f = {});
// The analytic model with the profile's figures: a measured op takes roofline / efficiency + the measured
// per-op overhead, where roofline = max(flops / peak, bytes / bandwidth) and efficiency is the profile's
// for (op, shape class) (the nearest measured class when its own is missing); backward = the op's measured
// ratio x forward; alpha/beta per collective (ring formula); what the profile lacks falls back to analytic.
std::unique_ptr<CostModel> calibrated_cost_model(const Cluster& c, const Profile& p, const AnalyticFigures& f = {});
// `base` with a run's measurements fed back (Profile::Feedback): every busy figure (forward_time, backward_time,
// collective_time, p2p_time, micro_batch_overhead, grad_accumulate_time, switch_time) x busy_scale, every tail
// figure (grad_sync_time, optimizer_time, clip_time, weight_read_time, step_overhead) x tail_scale. Its
// busy_scale()/tail_scale() are base's times these.
std::unique_ptr<CostModel> fed_back_cost_model(std::unique_ptr<CostModel> base, double busy_scale, double tail_scale);

// For tests: compute = flops / flops_per_s (backward 2x), no memory term; every collective on group n:
// (n-1)/n x bytes / link_bandwidth (all-reduce twice that) + latency; p2p = latency + bytes / p2p_bandwidth;
// optimizer time 0.
struct FakeFigures {
  double flops_per_s = 1e9;
  double link_bandwidth = 1e9;
  double p2p_bandwidth = 1e9;
  double latency = 0;
};
std::unique_ptr<CostModel> fake_cost_model(const Cluster& c, const FakeFigures& f);

}  // namespace braid::planner
