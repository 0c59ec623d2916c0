// The analytic, calibrated and fake cost models, alpha-beta collective times and the calibration profile's
// YAML form. Formulas: docs/planner.md ("Cost model").
#include "planner/cost_model.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>

#include "io/expr.h"
#include "io/yaml_source.h"

namespace braid::planner {

double cache_fraction(double cache_bytes, double per_device_bytes, int devices) {
  const double total = per_device_bytes * std::max(1, devices);
  return total > 0 ? std::min(1.0, 0.5 * cache_bytes / total) : 1.0;
}

double roofline(double flops, double bytes, double peak, double bw, double cache_bw, double cache_share) {
  const double b = cache_bw > 0 && bytes <= cache_share ? cache_bw : bw;
  return std::max(peak > 0 ? flops / peak : 0, b > 0 ? bytes / b : 0);
}

std::string to_string(Collective c) {
  switch (c) {
    case Collective::AllReduce: return "all_reduce";
    case Collective::AllGather: return "all_gather";
    case Collective::ReduceScatter: return "reduce_scatter";
    case Collective::AllToAll: return "all_to_all";
  }
  return "?";
}

Group group_of(const Cluster& c, std::span<const int> devices) {
  std::set<int> nodes;
  for (int d : devices) nodes.insert(c.node_of(d));
  return Group{static_cast<int>(devices.size()), std::max<int>(1, static_cast<int>(nodes.size()))};
}

double alpha_beta_time(Collective c, Algorithm a, double bytes, const Group& g, const Link& intra, const Link& inter) {
  int n = g.size;
  if (n <= 1 || bytes <= 0) return 0;
  double bw = intra.bandwidth, alpha = intra.latency;
  if (g.nodes > 1) {
    double per_node = static_cast<double>(n) / g.nodes;
    bw = std::min(intra.bandwidth, inter.bandwidth * per_node);
    alpha = std::max(intra.latency, inter.latency);
  }
  double frac = static_cast<double>(n - 1) / n;
  switch (c) {
    case Collective::AllReduce:
      if (a == Algorithm::Tree) return 2 * std::ceil(std::log2(n)) * alpha + 2 * bytes / bw;
      return 2 * (n - 1) * alpha + 2 * frac * bytes / bw;
    case Collective::AllGather:
    case Collective::ReduceScatter:
    case Collective::AllToAll:
      return (n - 1) * alpha + frac * bytes / bw;
  }
  return 0;
}

std::string shape_class(double flops) {
  const int k = std::clamp(static_cast<int>(std::floor(std::log10(std::max(flops, 1.0)))), 0, 15);
  return "1e" + std::to_string(k);
}

namespace {
// The decade K of a class name "1eK" (profiles written before decades used small / medium / large: read as
// the decades their ranges centred on); -1 when the name is none of these.
int class_decade(const std::string& c) {
  if (c == "small") return 5;
  if (c == "medium") return 7;
  if (c == "large") return 9;
  if (c.size() < 3 || c.size() > 4 || c.compare(0, 2, "1e") != 0) return -1;
  for (size_t i = 2; i < c.size(); ++i)
    if (c[i] < '0' || c[i] > '9') return -1;
  const int k = std::stoi(c.substr(2));
  return k <= 15 ? k : -1;
}
}  // namespace

double class_efficiency(const std::map<std::string, double>& classes, double flops, double fallback) {
  // Piecewise linear in log10(FLOPs) between the measured decades (each taken at its centre, K + 0.5);
  // the nearest decade's figure outside them.
  const double x = std::log10(std::max(flops, 1.0));
  double lo_x = -1, lo_e = 0, hi_x = -1, hi_e = 0;
  for (const auto& [cls, e] : classes) {
    const int k = class_decade(cls);
    if (k < 0) continue;
    const double c = k + 0.5;
    if (c <= x && (lo_x < 0 || c > lo_x)) lo_x = c, lo_e = e;
    if (c > x && (hi_x < 0 || c < hi_x)) hi_x = c, hi_e = e;
  }
  if (lo_x < 0 && hi_x < 0) return fallback;
  if (lo_x < 0) return hi_e;
  if (hi_x < 0) return lo_e;
  return lo_e + (hi_e - lo_e) * (x - lo_x) / (hi_x - lo_x);
}

namespace {

using ops::op_cost;

class Analytic : public CostModel {
 public:
  Analytic(Cluster c, AnalyticFigures f) : c_(std::move(c)), f_(f) {
    if (c_.device.compute_efficiency > 0) f_.compute_efficiency = c_.device.compute_efficiency;  // the cluster file's
  }
  std::string name() const override { return "analytic"; }
  const Cluster& cluster() const override { return c_; }
  double forward_time(const ops::OpDef& op, const ops::Attrs& attrs, std::span<const TensorDesc> in,
                      std::span<const TensorDesc> out) const override {
    ops::Cost k = op_cost(op, attrs, in, out);
    DType t = out.empty() ? DType::f32 : out[0].dtype;
    double peak = c_.device.peak(t) * efficiency(op.name, k.flops);
    double compute = peak > 0 ? k.flops / peak : 0;
    double bw = c_.device.memory_bandwidth * f_.memory_efficiency;
    double memory = bw > 0 ? k.bytes / bw : 0;
    return std::max(compute, memory) + f_.op_overhead_s;
  }
  double backward_time(const ops::OpDef& op, const ops::Attrs& attrs, std::span<const TensorDesc> in,
                       std::span<const TensorDesc> out) const override {
    return backward_ratio(op.name) * forward_time(op, attrs, in, out);
  }
  double collective_time(Collective c, double bytes, const Group& g) const override {
    double ring = alpha_beta_time(c, Algorithm::Ring, bytes, g, c_.intra_node, c_.inter_node);
    if (c != Collective::AllReduce) return ring;
    return std::min(ring, alpha_beta_time(c, Algorithm::Tree, bytes, g, c_.intra_node, c_.inter_node));
  }
  double p2p_time(double bytes, bool cross_node) const override {
    const Link& l = cross_node ? c_.inter_node : c_.intra_node;
    return l.latency + (l.bandwidth > 0 ? bytes / l.bandwidth : 0);
  }
  double optimizer_time(double param_bytes, int states) const override {
    // Reads parameter, gradient and states, writes parameter and states.
    double bw = c_.device.memory_bandwidth * f_.memory_efficiency;
    return bw > 0 ? param_bytes * (3.0 + 2.0 * states) / bw : 0;
  }

 protected:
  virtual double efficiency(const std::string&, double) const { return f_.compute_efficiency; }
  virtual double backward_ratio(const std::string&) const { return f_.backward_factor; }
  Cluster c_;
  AnalyticFigures f_;
};

class Calibrated : public Analytic {
 public:
  Calibrated(Cluster c, Profile p, AnalyticFigures f) : Analytic(std::move(c), f), p_(std::move(p)) {
    if (p_.cpu.op_overhead > 0) f_.op_overhead_s = p_.cpu.op_overhead;
  }
  std::string name() const override { return "calibrated"; }
  // The warm figure for the part of the devices' optimizer working set (parameter, gradient and states of every
  // device, all updating at once) that fits in half the shared cache (the step's activations, other data and
  // the other half's conflicts take the rest), the cold figure for the remainder. On the MLP 784-512-512-10
  // under dp 4 on cpu:4 (32 MB of parameters, gradients and momentum on a 32 MiB L3) that is half and half:
  // 0.95 ms, where the trace shows two devices of a core taking 0.38-0.56 ms each (docs/planner.md).
  double optimizer_time(double param_bytes, int states) const override {
    auto it = p_.optimizer_s_per_byte.find(states);
    if (it == p_.optimizer_s_per_byte.end()) return Analytic::optimizer_time(param_bytes, states);
    auto warm = p_.optimizer_warm_s_per_byte.find(states);
    if (warm == p_.optimizer_warm_s_per_byte.end() || p_.cache_bytes <= 0 || param_bytes <= 0)
      return param_bytes * it->second;
    const double fits = cache_fraction(param_bytes, states);
    return param_bytes * (fits * warm->second + (1 - fits) * it->second);
  }
  double switch_time(double param_bytes) const override {
    if (c_.host_cores <= 0 || c_.devices() <= c_.host_cores) return 0;
    return 3 * param_bytes * p_.switch_s_per_byte;
  }
  // Only the part of the weights the cache did not keep: packing from cache is within the ops' fitted figures.
  double weight_read_time(double param_bytes, int states) const override {
    if (p_.weight_s_per_byte <= 0 || p_.cache_bytes <= 0 || param_bytes <= 0) return 0;
    return param_bytes * p_.weight_s_per_byte * (1 - cache_fraction(param_bytes, states));
  }
  double clip_time(double param_bytes) const override { return param_bytes * p_.clip_s_per_byte; }
  double step_overhead() const override { return p_.runner.step_overhead; }
  double micro_batch_overhead(bool pipelined) const override {
    return pipelined ? p_.runner.pipeline_micro_batch_overhead : p_.runner.micro_batch_overhead;
  }
  // Measured (exec::accumulate on N devices at once), else: read the gradient and the accumulated one, write
  // it back, memory bound at the measured bandwidth (a DRAM figure: gradients of a micro-batch are in cache).
  double grad_accumulate_time(double param_bytes) const override {
    if (p_.accumulate_s_per_byte > 0) return param_bytes * p_.accumulate_s_per_byte;
    double bw = c_.device.memory_bandwidth;
    return bw > 0 ? 3 * param_bytes / bw : 0;
  }
  // Measured ops: the roofline max(flops / peak, bytes / bandwidth) over the measured fraction of it, plus the
  // measured per-op overhead (what calibration fitted); others: the analytic figures.
  double forward_time(const ops::OpDef& op, const ops::Attrs& attrs, std::span<const TensorDesc> in,
                      std::span<const TensorDesc> out) const override {
    auto it = p_.efficiency.find(op.name);
    if (it == p_.efficiency.end() || it->second.empty()) return Analytic::forward_time(op, attrs, in, out);
    ops::Cost k = op_cost(op, attrs, in, out);
    DType t = out.empty() ? DType::f32 : out[0].dtype;
    const double roof = roofline(k.flops, k.bytes, c_.device.peak(t), c_.device.memory_bandwidth, p_.cache_bandwidth,
                                 p_.cache_bytes / 2 / std::max(1, c_.devices()));
    return roof / std::max(1e-6, efficiency(op.name, k.flops)) + f_.op_overhead_s;
  }
  double collective_time(Collective c, double bytes, const Group& g) const override {
    return measured(to_string(c), c, bytes, g);
  }
  // The cold figure (calibrate_machine.cpp, "grad_all_reduce") where measured, else the all-reduce's.
  double grad_sync_time(double bytes, const Group& g) const override {
    return measured("grad_all_reduce", Collective::AllReduce, bytes, g);
  }

 protected:
  // Collective `c` by the profile's fit named `name` (falling back to c's own, then to the analytic figure).
  double measured(const std::string& name, Collective c, double bytes, const Group& g) const {
    // A group smaller than the devices: its own measurement (every such group at once) when there is one.
    auto it = p_.collectives.find(name + "@" + std::to_string(g.size));
    if (it == p_.collectives.end() || g.size == p_.devices) it = p_.collectives.find(name);
    if (it == p_.collectives.end() && name != to_string(c)) return measured(to_string(c), c, bytes, g);
    if (it == p_.collectives.end() || g.nodes > 1) return Analytic::collective_time(c, bytes, g);
    if (g.size <= 1 || bytes <= 0) return 0;
    // Measured as a ring on the in-process backend: steps x alpha + traffic per rank x beta.
    int n = g.size;
    double frac = static_cast<double>(n - 1) / n;
    double steps = c == Collective::AllReduce ? 2.0 * (n - 1) : n - 1;
    double traffic = (c == Collective::AllReduce ? 2 : 1) * frac * bytes;
    return steps * it->second.first + traffic * it->second.second;
  }

  double efficiency(const std::string& op, double flops) const override {
    auto it = p_.efficiency.find(op);
    if (it == p_.efficiency.end()) return f_.compute_efficiency;
    if (it->second.empty()) return f_.compute_efficiency;
    return class_efficiency(it->second, flops, f_.compute_efficiency);
  }
  double backward_ratio(const std::string& op) const override {
    auto it = p_.backward_ratio.find(op);
    return it == p_.backward_ratio.end() ? f_.backward_factor : it->second;
  }
  // Of the planned devices' working sets (parameters, gradients and `states` optimizer states of `param_bytes`
  // each). The cluster's devices, not the profile's: a profile of cpu:4 planning cpu:2 has two devices' data in
  // the cache.
  double cache_fraction(double param_bytes, int states) const {
    return planner::cache_fraction(p_.cache_bytes, param_bytes * (2.0 + states), c_.devices());
  }
  Profile p_;
};

class Fake : public CostModel {
 public:
  Fake(Cluster c, FakeFigures f) : c_(std::move(c)), f_(f) {}
  std::string name() const override { return "fake"; }
  const Cluster& cluster() const override { return c_; }
  double forward_time(const ops::OpDef& op, const ops::Attrs& attrs, std::span<const TensorDesc> in,
                      std::span<const TensorDesc> out) const override {
    return op_cost(op, attrs, in, out).flops / f_.flops_per_s;
  }
  double backward_time(const ops::OpDef& op, const ops::Attrs& attrs, std::span<const TensorDesc> in,
                       std::span<const TensorDesc> out) const override {
    return 2 * forward_time(op, attrs, in, out);
  }
  double collective_time(Collective c, double bytes, const Group& g) const override {
    if (g.size <= 1 || bytes <= 0) return 0;
    double frac = static_cast<double>(g.size - 1) / g.size;
    return f_.latency + (c == Collective::AllReduce ? 2 : 1) * frac * bytes / f_.link_bandwidth;
  }
  double p2p_time(double bytes, bool) const override { return f_.latency + bytes / f_.p2p_bandwidth; }
  double optimizer_time(double, int) const override { return 0; }

 private:
  Cluster c_;
  FakeFigures f_;
};

// A model with a run's measurements fed back: the base's figures scaled (cost_model.h).
class FedBack : public CostModel {
 public:
  FedBack(std::unique_ptr<CostModel> base, double busy, double tail) : b_(std::move(base)), busy_(busy), tail_(tail) {}
  std::string name() const override { return b_->name() + " (fed back)"; }
  const Cluster& cluster() const override { return b_->cluster(); }
  double forward_time(const ops::OpDef& op, const ops::Attrs& attrs, std::span<const TensorDesc> in,
                      std::span<const TensorDesc> out) const override {
    return busy_ * b_->forward_time(op, attrs, in, out);
  }
  double backward_time(const ops::OpDef& op, const ops::Attrs& attrs, std::span<const TensorDesc> in,
                       std::span<const TensorDesc> out) const override {
    return busy_ * b_->backward_time(op, attrs, in, out);
  }
  double collective_time(Collective c, double bytes, const Group& g) const override {
    return busy_ * b_->collective_time(c, bytes, g);
  }
  double grad_sync_time(double bytes, const Group& g) const override { return tail_ * b_->grad_sync_time(bytes, g); }
  double p2p_time(double bytes, bool cross_node) const override { return busy_ * b_->p2p_time(bytes, cross_node); }
  double optimizer_time(double param_bytes, int states) const override {
    return tail_ * b_->optimizer_time(param_bytes, states);
  }
  double step_overhead() const override { return tail_ * b_->step_overhead(); }
  double micro_batch_overhead(bool pipelined) const override { return busy_ * b_->micro_batch_overhead(pipelined); }
  double grad_accumulate_time(double param_bytes) const override { return busy_ * b_->grad_accumulate_time(param_bytes); }
  double clip_time(double param_bytes) const override { return tail_ * b_->clip_time(param_bytes); }
  double weight_read_time(double param_bytes, int states) const override {
    return tail_ * b_->weight_read_time(param_bytes, states);
  }
  double switch_time(double param_bytes) const override { return busy_ * b_->switch_time(param_bytes); }
  double busy_scale() const override { return busy_ * b_->busy_scale(); }
  double tail_scale() const override { return tail_ * b_->tail_scale(); }

 private:
  std::unique_ptr<CostModel> b_;
  double busy_, tail_;
};

}  // namespace

std::unique_ptr<CostModel> fed_back_cost_model(std::unique_ptr<CostModel> base, double busy_scale, double tail_scale) {
  return std::make_unique<FedBack>(std::move(base), busy_scale, tail_scale);
}
std::unique_ptr<CostModel> analytic_cost_model(const Cluster& c, const AnalyticFigures& f) {
  return std::make_unique<Analytic>(c, f);
}
std::unique_ptr<CostModel> calibrated_cost_model(const Cluster& c, const Profile& p, const AnalyticFigures& f) {
  return std::make_unique<Calibrated>(c, p, f);
}
std::unique_ptr<CostModel> fake_cost_model(const Cluster& c, const FakeFigures& f) {
  return std::make_unique<Fake>(c, f);
}

// ---- the profile's YAML form ----------------------------------------------------------------------------------
namespace {

std::string num(double x) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, x);
  return std::string(buf, r.ptr);
}

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace

std::string to_yaml(const Profile& p) {
  std::string out = "# braid calibration profile: see docs/planner.md (written by braid calibrate)\n";
  out += "machine: " + quoted(p.machine) + "\n";
  out += "braid_version: " + quoted(p.braid_version) + "\n";
  out += "devices: " + std::to_string(p.devices) + "\n";
  out += "cpu: {peak_flops_f32: " + num(p.cpu.peak_flops_f32) + ", memory_bandwidth: " + num(p.cpu.memory_bandwidth) +
         ", memory_bytes: " + num(p.cpu.memory_bytes) + ", link_bandwidth: " + num(p.cpu.link_bandwidth) +
         ", link_latency: " + num(p.cpu.link_latency) +
         (p.cpu.op_overhead > 0 ? ", op_overhead: " + num(p.cpu.op_overhead) : std::string()) + "}\n";
  out += "efficiency:\n";
  for (const auto& [op, m] : p.efficiency) {
    out += "  " + op + ": {";
    bool first = true;
    for (const auto& [k, v] : m) out += std::string(first ? "" : ", ") + k + ": " + num(v), first = false;
    out += "}\n";
  }
  out += "backward_ratio:\n";
  for (const auto& [op, v] : p.backward_ratio) out += "  " + op + ": " + num(v) + "\n";
  out += "collectives:\n";
  for (const auto& [c, ab] : p.collectives)
    out += "  " + c + ": {alpha: " + num(ab.first) + ", beta: " + num(ab.second) + "}\n";
  auto per_states = [&](const char* key, const std::map<int, double>& m) {
    if (m.empty()) return;
    out += std::string(key) + ":";
    bool first = true;
    for (const auto& [k, v] : m) out += std::string(first ? " {" : ", ") + "states" + std::to_string(k) + ": " + num(v), first = false;
    out += "}\n";
  };
  per_states("optimizer_s_per_byte", p.optimizer_s_per_byte);
  per_states("optimizer_warm_s_per_byte", p.optimizer_warm_s_per_byte);
  if (p.cache_bytes > 0) out += "cache_bytes: " + num(p.cache_bytes) + "\n";
  if (p.cache_bandwidth > 0) out += "cache_bandwidth: " + num(p.cache_bandwidth) + "\n";
  if (p.clip_s_per_byte > 0) out += "clip_s_per_byte: " + num(p.clip_s_per_byte) + "\n";
  if (p.accumulate_s_per_byte > 0) out += "accumulate_s_per_byte: " + num(p.accumulate_s_per_byte) + "\n";
  if (p.weight_s_per_byte > 0) out += "weight_s_per_byte: " + num(p.weight_s_per_byte) + "\n";
  if (p.switch_s_per_byte > 0) out += "switch_s_per_byte: " + num(p.switch_s_per_byte) + "\n";
  if (!p.busy_speed.empty()) {
    out += "busy_speed: [";
    for (size_t i = 0; i < p.busy_speed.size(); ++i) out += (i ? ", " : "") + num(p.busy_speed[i]);
    out += "]\n";
  }
  const Profile::Runner& r = p.runner;
  if (r.step_overhead > 0 || r.micro_batch_overhead > 0 || r.pipeline_micro_batch_overhead > 0)
    out += "runner: {step_overhead: " + num(r.step_overhead) + ", micro_batch_overhead: " + num(r.micro_batch_overhead) +
           ", pipeline_micro_batch_overhead: " + num(r.pipeline_micro_batch_overhead) + "}\n";
  if (!p.feedback.empty()) {
    out += "feedback:\n";
    for (const Profile::Feedback& f : p.feedback)
      out += "  - {devices: " + std::to_string(f.devices) + ", records: " + std::to_string(f.records) +
             ", busy_scale: " + num(f.busy_scale) + ", tail_scale: " + num(f.tail_scale) + "}\n";
  }
  return out;
}

Profile parse_profile(const std::string& text, const std::string& path, Diagnostics& diags) {
  Profile p;
  io::YNode root = io::parse_yaml(text, path, diags);
  if (!root.is_map()) {
    if (!root.is_null()) diags.error(root.loc, "a calibration profile is a mapping");
    return p;
  }
  io::check_keys(root, {"machine", "braid_version", "devices", "cpu", "efficiency", "backward_ratio", "collectives",
                        "optimizer_s_per_byte", "optimizer_warm_s_per_byte", "cache_bytes", "cache_bandwidth", "clip_s_per_byte", "accumulate_s_per_byte", "weight_s_per_byte", "switch_s_per_byte", "runner", "busy_speed", "feedback"},
                 "the calibration profile", diags);
  auto str = [&](const char* k, std::string* dst) {
    if (auto* n = root.get(k))
      if (auto s = io::eval_string(*n, k, diags)) *dst = *s;
  };
  str("machine", &p.machine);
  str("braid_version", &p.braid_version);
  if (auto* n = root.get("devices"))
    if (auto v = io::eval_int(*n, {}, "devices", diags)) p.devices = static_cast<int>(*v);
  auto number = [&](const io::YNode& n, const std::string& what, double* dst) {
    if (auto v = io::eval_float(n, {}, what, diags)) {
      if (!std::isfinite(*v) || *v < 0) diags.error(n.loc, what + " must be a finite number >= 0");
      else *dst = *v;
    }
  };
  if (auto* c = root.get("cpu"); c && c->is_map()) {
    io::check_keys(*c, {"peak_flops_f32", "memory_bandwidth", "memory_bytes", "link_bandwidth", "link_latency",
                        "op_overhead"},
                   "cpu", diags);
    if (auto* n = c->get("op_overhead")) number(*n, "cpu.op_overhead", &p.cpu.op_overhead);
    std::pair<const char*, double*> fields[] = {{"peak_flops_f32", &p.cpu.peak_flops_f32},
                                                {"memory_bandwidth", &p.cpu.memory_bandwidth},
                                                {"memory_bytes", &p.cpu.memory_bytes},
                                                {"link_bandwidth", &p.cpu.link_bandwidth},
                                                {"link_latency", &p.cpu.link_latency}};
    for (auto [k, dst] : fields) {
      if (auto* n = c->get(k)) number(*n, std::string("cpu.") + k, dst);
      else diags.error(c->loc, std::string("cpu needs '") + k + "'");
    }
  }
  if (auto* e = root.get("efficiency"); e && e->is_map())
    for (const auto& [k, v] : e->map) {
      if (!v.is_map()) {
        diags.error(v.loc, "efficiency." + k.scalar + " must map shape classes to fractions");
        continue;
      }
      for (const auto& [c, x] : v.map) {
        if (class_decade(c.scalar) < 0) {
          diags.error(c.loc, "efficiency." + k.scalar + ": '" + c.scalar + "' is not a shape class",
                      "classes are FLOP decades: 1e0 ... 1e15 (1e7: 10^7 to 10^8 forward FLOPs)");
          continue;
        }
        number(x, "efficiency." + k.scalar + "." + c.scalar, &p.efficiency[k.scalar][c.scalar]);
      }
    }
  if (auto* b = root.get("backward_ratio"); b && b->is_map())
    for (const auto& [k, v] : b->map) number(v, "backward_ratio." + k.scalar, &p.backward_ratio[k.scalar]);
  if (auto* c = root.get("collectives"); c && c->is_map())
    for (const auto& [k, v] : c->map) {
      io::check_keys(v, {"alpha", "beta"}, "collectives." + k.scalar, diags);
      auto& ab = p.collectives[k.scalar];
      if (auto* a = v.get("alpha")) number(*a, "collectives." + k.scalar + ".alpha", &ab.first);
      if (auto* b = v.get("beta")) number(*b, "collectives." + k.scalar + ".beta", &ab.second);
    }
  auto per_states = [&](const char* key, std::map<int, double>* dst) {
    if (auto* o = root.get(key); o && o->is_map()) {
      io::check_keys(*o, {"states0", "states1", "states2"}, key, diags);
      for (const auto& [k, v] : o->map)
        if (k.scalar.size() == 7 && k.scalar.rfind("states", 0) == 0)
          number(v, std::string(key) + "." + k.scalar, &(*dst)[k.scalar[6] - '0']);
    }
  };
  per_states("optimizer_s_per_byte", &p.optimizer_s_per_byte);
  per_states("optimizer_warm_s_per_byte", &p.optimizer_warm_s_per_byte);
  if (auto* c = root.get("cache_bytes")) number(*c, "cache_bytes", &p.cache_bytes);
  if (auto* c = root.get("cache_bandwidth")) number(*c, "cache_bandwidth", &p.cache_bandwidth);
  if (auto* c = root.get("clip_s_per_byte")) number(*c, "clip_s_per_byte", &p.clip_s_per_byte);
  if (auto* c = root.get("accumulate_s_per_byte")) number(*c, "accumulate_s_per_byte", &p.accumulate_s_per_byte);
  if (auto* c = root.get("weight_s_per_byte")) number(*c, "weight_s_per_byte", &p.weight_s_per_byte);
  if (auto* c = root.get("switch_s_per_byte")) number(*c, "switch_s_per_byte", &p.switch_s_per_byte);
  if (auto* b = root.get("busy_speed")) {
    if (!b->is_seq()) diags.error(b->loc, "busy_speed must be a list of speeds, one per number of busy devices");
    else
      for (size_t i = 0; i < b->seq.size(); ++i) {
        double x = 0;
        number(b->seq[i], "busy_speed[" + std::to_string(i) + "]", &x);
        p.busy_speed.push_back(x);
      }
  }
  if (auto* r = root.get("runner"); r && r->is_map()) {
    io::check_keys(*r, {"step_overhead", "micro_batch_overhead", "pipeline_micro_batch_overhead"}, "runner", diags);
    std::pair<const char*, double*> fields[] = {{"step_overhead", &p.runner.step_overhead},
                                                {"micro_batch_overhead", &p.runner.micro_batch_overhead},
                                                {"pipeline_micro_batch_overhead", &p.runner.pipeline_micro_batch_overhead}};
    for (auto [k, dst] : fields)
      if (auto* n = r->get(k)) number(*n, std::string("runner.") + k, dst);
  }
  if (auto* fb = root.get("feedback")) {
    if (!fb->is_seq()) diags.error(fb->loc, "feedback must be a list of {devices, records, busy_scale, tail_scale}");
    else
      for (const io::YNode& e : fb->seq) {
        if (!e.is_map()) {
          diags.error(e.loc, "a feedback entry is a mapping {devices, records, busy_scale, tail_scale}");
          continue;
        }
        io::check_keys(e, {"devices", "records", "busy_scale", "tail_scale"}, "feedback", diags);
        Profile::Feedback f;
        for (const char* k : {"devices", "records"}) {
          const io::YNode* n = e.get(k);
          if (!n) {
            diags.error(e.loc, std::string("a feedback entry needs '") + k + "'");
            continue;
          }
          if (auto v = io::eval_int(*n, {}, std::string("feedback.") + k, diags)) {
            if (*v < 1 || *v > 1000000) diags.error(n->loc, std::string("feedback.") + k + " must be between 1 and 1000000");
            else (std::string(k) == "devices" ? f.devices : f.records) = static_cast<int>(*v);
          }
        }
        for (auto [k, dst] : {std::pair<const char*, double*>{"busy_scale", &f.busy_scale}, {"tail_scale", &f.tail_scale}}) {
          const io::YNode* n = e.get(k);
          if (!n) {
            diags.error(e.loc, std::string("a feedback entry needs '") + k + "'");
            continue;
          }
          number(*n, std::string("feedback.") + k, dst);
          if (*dst <= 0) diags.error(n->loc, std::string("feedback.") + k + " must be > 0");
        }
        if (f.devices > 0 && p.feedback_for(f.devices))
          diags.error(e.loc, "a second feedback entry for devices " + std::to_string(f.devices));
        p.feedback.push_back(f);
      }
  }
  return p;
}

}  // namespace braid::planner
