// Cluster presets and the cluster file. Every preset number is documented with its source in
// docs/planner.md ("Presets"); change one here and there together.
#include "planner/cluster.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "io/expr.h"
#include "io/paths.h"
#include "io/yaml_source.h"

namespace braid::planner {

double DeviceKind::peak(DType t) const {
  auto it = peak_flops.find(std::string(dtype_name(t)));
  if (it != peak_flops.end()) return it->second;
  it = peak_flops.find("f32");
  return it != peak_flops.end() ? it->second : 0;
}

CpuFigures fallback_cpu_figures(int n, int cores) {
  // One AVX2 core: 2 FMA units x 8 f32 lanes x 2 flops x ~2 GHz = 64 GFLOP/s; ~10 GB/s of DRAM bandwidth
  // per core; 4 GiB per device; in-process collectives ~5 GB/s with ~20 us per step (docs/planner.md).
  double share = std::min(1.0, static_cast<double>(std::max(1, cores)) / std::max(1, n));
  CpuFigures f;
  f.peak_flops_f32 = 64e9 * share;
  f.memory_bandwidth = 10e9 * share;
  f.memory_bytes = 4.0 * (1ull << 30);
  f.link_bandwidth = 5e9;
  f.link_latency = 20e-6;
  return f;
}

namespace {

DeviceKind h200() {
  DeviceKind d;
  d.name = "h200-sxm";
  // NVIDIA H200 datasheet (dense, i.e. the sparsity figures halved).
  d.peak_flops = {{"f64", 67e12}, {"f32", 67e12}, {"tf32", 494.5e12}, {"bf16", 989.5e12}, {"f16", 989.5e12}};
  d.memory_bytes = 141e9;
  d.memory_bandwidth = 4.8e12;
  return d;
}

DeviceKind a100_80gb() {
  DeviceKind d;
  d.name = "a100-sxm4-80gb";
  // NVIDIA A100 datasheet, SXM4 80GB, dense.
  d.peak_flops = {{"f64", 19.5e12}, {"f32", 19.5e12}, {"tf32", 156e12}, {"bf16", 312e12}, {"f16", 312e12}};
  d.memory_bytes = 80e9;
  d.memory_bandwidth = 2.039e12;
  return d;
}

bool parse_count(const std::string& s, int* out) {
  if (s.empty() || s.size() > 6) return false;
  auto r = std::from_chars(s.data(), s.data() + s.size(), *out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size() && *out >= 1;
}

}  // namespace

std::vector<std::string> cluster_preset_names() { return {"cpu:N", "h200x1", "h200x8", "dgx-a100-80gb:N"}; }

bool is_cluster_preset(const std::string& name) {
  int n = 0;
  if (name == "h200x1" || name == "h200x8" || name == "dgx-a100-80gb") return true;
  for (const char* p : {"cpu:", "dgx-a100-80gb:"}) {
    std::string pre = p;
    if (name.rfind(pre, 0) == 0 && parse_count(name.substr(pre.size()), &n)) return true;
  }
  return false;
}

Cluster cluster_preset(const std::string& name, const CpuFigures& cpu, const SourceLoc& where) {
  Cluster c;
  c.name = name;
  int n = 0;
  if (name.rfind("cpu:", 0) == 0 && parse_count(name.substr(4), &n) && n <= 1024) {
    c.device.name = "cpu";
    c.device.peak_flops = {{"f32", cpu.peak_flops_f32}, {"f64", cpu.peak_flops_f32 / 2}};
    c.device.memory_bytes = cpu.memory_bytes;
    c.device.memory_bandwidth = cpu.memory_bandwidth;
    c.nodes = 1;
    c.devices_per_node = n;
    c.intra_node = {cpu.link_bandwidth, cpu.link_latency};
    c.inter_node = c.intra_node;
    c.host_cores = cpu.cores;
    if (static_cast<int>(cpu.busy_speed.size()) == c.devices()) c.busy_speed = cpu.busy_speed;
    return c;
  }
  if (name == "h200x1" || name == "h200x8") {
    c.device = h200();
    c.devices_per_node = name == "h200x1" ? 1 : 8;
    c.intra_node = {450e9, 3e-6};  // NVLink 4: 900 GB/s both directions together
    c.inter_node = {50e9, 5e-6};   // one 400 Gb/s NIC per GPU (unused within one node)
    return c;
  }
  if (name == "dgx-a100-80gb" || (name.rfind("dgx-a100-80gb:", 0) == 0 && parse_count(name.substr(14), &n))) {
    c.device = a100_80gb();
    c.nodes = name == "dgx-a100-80gb" ? 1 : n;
    c.devices_per_node = 8;
    c.intra_node = {300e9, 3e-6};  // NVLink 3 through NVSwitch: 600 GB/s both directions together
    c.inter_node = {25e9, 6e-6};   // one 200 Gb/s HDR InfiniBand port per GPU
    return c;
  }
  throw UserError(where, "unknown cluster '" + name + "'",
                  "presets: cpu:N, h200x1, h200x8, dgx-a100-80gb:NODES; or a cluster file (docs/planner.md)");
}

// ---- the cluster file ---------------------------------------------------------------------------------------
namespace {

using io::YNode;

void need(const YNode& map, const std::vector<std::string>& keys, const std::string& what, Diagnostics& diags) {
  for (const auto& k : keys)
    if (!map.get(k)) diags.error(map.loc, what + " needs '" + k + "'");
}

bool positive(const YNode& n, const std::string& what, Diagnostics& diags, double* out, bool allow_zero = false) {
  auto v = io::eval_float(n, {}, what, diags);
  if (!v) return false;
  if (!std::isfinite(*v) || *v < 0 || (*v == 0 && !allow_zero)) {
    diags.error(n.loc, what + " must be " + (allow_zero ? "at least 0" : "positive") + ", got " + n.scalar);
    return false;
  }
  *out = *v;
  return true;
}

void read_link(const YNode* n, const std::string& what, Link* out, Diagnostics& diags) {
  if (!n) return;
  if (!n->is_map()) {
    diags.error(n->loc, what + " must be a mapping {bandwidth: bytes/s, latency: s}, got " + n->kind_name());
    return;
  }
  io::check_keys(*n, {"bandwidth", "latency"}, what, diags);
  need(*n, {"bandwidth", "latency"}, what, diags);
  if (auto* b = n->get("bandwidth")) positive(*b, "the bandwidth of " + what, diags, &out->bandwidth);
  if (auto* l = n->get("latency")) positive(*l, "the latency of " + what, diags, &out->latency, true);
}

}  // namespace

Cluster parse_cluster(const std::string& text, const std::string& path, Diagnostics& diags) {
  Cluster c;
  c.loc = SourceLoc{path, 1, 1};
  YNode root = io::parse_yaml(text, path, diags);
  if (root.is_null()) return c;
  if (!root.is_map()) {
    diags.error(root.loc, "a cluster file is a mapping (name, nodes, devices_per_node, device, links), got " +
                              root.kind_name());
    return c;
  }
  io::check_keys(root, {"name", "nodes", "devices_per_node", "device", "links"}, "the cluster file", diags);
  need(root, {"device", "links"}, "the cluster file", diags);
  if (auto* n = root.get("name"))
    if (auto s = io::eval_string(*n, "the cluster's name", diags)) c.name = *s;
  for (auto [key, dst] : {std::pair<const char*, int*>{"nodes", &c.nodes}, {"devices_per_node", &c.devices_per_node}})
    if (auto* n = root.get(key)) {
      auto v = io::eval_int(*n, {}, std::string("'") + key + "'", diags);
      if (v && (*v < 1 || *v > 1'000'000)) diags.error(n->loc, std::string("'") + key + "' must be from 1 to 1000000, got " + std::to_string(*v));
      else if (v) *dst = static_cast<int>(*v);
    }
  if (const YNode* d = root.get("device")) {
    if (!d->is_map()) {
      diags.error(d->loc, "'device' must be a mapping, got " + d->kind_name());
    } else {
      io::check_keys(*d, {"name", "peak_flops", "memory_bytes", "memory_bandwidth", "compute_efficiency"}, "the device", diags);
      need(*d, {"peak_flops", "memory_bytes", "memory_bandwidth"}, "the device", diags);
      if (auto* n = d->get("name"))
        if (auto s = io::eval_string(*n, "the device's name", diags)) c.device.name = *s;
      if (auto* p = d->get("peak_flops")) {
        if (!p->is_map()) {
          diags.error(p->loc, "'peak_flops' must map dtypes to FLOP/s, e.g. {f32: 19.5e12, bf16: 312e12}");
        } else {
          std::vector<std::string> names = dtype_names();
          names.push_back("tf32");
          io::check_keys(*p, names, "peak_flops", diags);
          for (const auto& [k, v] : p->map) {
            double x = 0;
            if (positive(v, "peak_flops." + k.scalar, diags, &x)) c.device.peak_flops[k.scalar] = x;
          }
          if (!p->get("f32")) diags.error(p->loc, "'peak_flops' needs 'f32' (used for dtypes without their own entry)");
        }
      }
      if (auto* m = d->get("memory_bytes")) positive(*m, "'memory_bytes'", diags, &c.device.memory_bytes);
      if (auto* m = d->get("memory_bandwidth")) positive(*m, "'memory_bandwidth'", diags, &c.device.memory_bandwidth);
      if (auto* e = d->get("compute_efficiency")) {
        double x = 0;
        if (positive(*e, "'compute_efficiency'", diags, &x)) {
          if (x > 1) diags.error(e->loc, "'compute_efficiency' is a fraction of the peak, at most 1, got " + e->scalar);
          else c.device.compute_efficiency = x;
        }
      }
    }
  }
  if (const YNode* l = root.get("links")) {
    if (!l->is_map()) {
      diags.error(l->loc, "'links' must be a mapping {intra_node: ..., inter_node: ...}, got " + l->kind_name());
    } else {
      io::check_keys(*l, {"intra_node", "inter_node"}, "links", diags);
      need(*l, {"intra_node"}, "links", diags);
      read_link(l->get("intra_node"), "links.intra_node", &c.intra_node, diags);
      if (l->get("inter_node")) read_link(l->get("inter_node"), "links.inter_node", &c.inter_node, diags);
      else if (c.nodes > 1) diags.error(l->loc, "links needs 'inter_node' when nodes > 1");
      else c.inter_node = c.intra_node;
    }
  }
  return c;
}

Cluster read_cluster(const std::string& path, Diagnostics& diags) {
  std::string text;
  try {
    text = io::read_file(path, io::YamlLimits{}.max_bytes);
  } catch (const UserError& e) {
    std::string why = e.diagnostics().empty() ? "cannot read" : e.diagnostics()[0].message;
    diags.error(SourceLoc{path, 0, 0}, "cannot read cluster file '" + path + "': " + why);
    return {};
  }
  return parse_cluster(text, path, diags);
}

namespace {
std::string num(double x) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, x);
  return std::string(buf, r.ptr);
}
}  // namespace

std::string to_yaml(const Cluster& c) {
  std::string out = "# braid cluster file: see docs/planner.md\n";
  out += "name: \"" + c.name + "\"\n";
  out += "nodes: " + std::to_string(c.nodes) + "\n";
  out += "devices_per_node: " + std::to_string(c.devices_per_node) + "\n";
  out += "device:\n  name: \"" + c.device.name + "\"\n  peak_flops: {";
  bool first = true;
  for (const auto& [k, v] : c.device.peak_flops) {
    out += (first ? "" : ", ") + k + ": " + num(v);
    first = false;
  }
  out += "}\n  memory_bytes: " + num(c.device.memory_bytes) + "\n";
  out += "  memory_bandwidth: " + num(c.device.memory_bandwidth) + "\n";
  if (c.device.compute_efficiency > 0) out += "  compute_efficiency: " + num(c.device.compute_efficiency) + "\n";
  out += "links:\n";
  out += "  intra_node: {bandwidth: " + num(c.intra_node.bandwidth) + ", latency: " + num(c.intra_node.latency) + "}\n";
  out += "  inter_node: {bandwidth: " + num(c.inter_node.bandwidth) + ", latency: " + num(c.inter_node.latency) + "}\n";
  return out;
}

}  // namespace braid::planner
