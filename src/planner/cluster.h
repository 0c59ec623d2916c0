// The cluster a plan runs on: one device kind (peak FLOP/s per dtype, memory, memory bandwidth) repeated
// `devices_per_node` times in each of `nodes` nodes, with two levels of links (within a node, across nodes:
// bandwidth and latency). Device ids count node-major: device d is on node d / devices_per_node.
// Presets (cpu:N, h200x1, h200x8, dgx-a100-80gb:N) and the YAML form are documented, with the source of
// every number, in docs/planner.md. Pure data and parsing: measuring a machine is exec/calibrate's job.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"

namespace braid::planner {

struct DeviceKind {
  std::string name = "cpu";
  std::map<std::string, double> peak_flops;  // dtype name ("f32", "bf16", ...) -> FLOP/s of one device
  double memory_bytes = 0;                   // usable memory of one device
  double memory_bandwidth = 0;               // bytes/s of one device
  // The fraction of the peak the products reach (a cluster file's optional `compute_efficiency`, from a measurement of
  // the user's own kernels); 0: the cost model's default (AnalyticFigures::compute_efficiency, 0.5).
  double compute_efficiency = 0;
  // Peak FLOP/s for `t`: its entry, else f32's (integer ops count as f32).
  double peak(DType t) const;
};

struct Link {
  double bandwidth = 0;  // bytes/s one device can send (and receive) at once over this level
  double latency = 0;    // seconds per message (alpha)
};

struct Cluster {
  std::string name;
  DeviceKind device;
  int nodes = 1;
  int devices_per_node = 1;
  Link intra_node;  // between devices of one node
  Link inter_node;  // between devices of different nodes (per device: its own NIC share)
  SourceLoc loc;    // the file, when read from one
  // Processor cores the devices share (cpu:N devices in one process), 0 when every device has its own
  // processor. With cores > 0 the devices' figures are those of all devices busy at once, and a pipeline
  // stage computing while others wait runs faster (evaluate.h: processor sharing). Not in cluster files.
  int host_cores = 0;
  // Measured (calibration): busy_speed[b - 1] = a device's compute speed while b devices compute, relative
  // to all of them computing (busy_speed.back() = 1). Empty: the rule from host_cores (evaluate.h). Not in
  // cluster files.
  std::vector<double> busy_speed;
  int devices() const { return nodes * devices_per_node; }
  int node_of(int device) const { return device / devices_per_node; }
};

// Figures for a cpu:N preset: measured by `braid calibrate` (a profile), else the documented fallbacks.
struct CpuFigures {
  double peak_flops_f32 = 0;     // of one logical device (its share of the cores)
  double memory_bandwidth = 0;   // of one logical device
  double memory_bytes = 0;       // of one logical device
  double link_bandwidth = 0;     // in-process collective bandwidth (bytes/s)
  double link_latency = 0;       // in-process collective latency (s)
  double op_overhead = 0;        // seconds per op launch (measured by calibration; 0: the analytic default)
  int cores = 0;                 // the machine's cores the N devices share (0: not modelled); Cluster::host_cores
  std::vector<double> busy_speed;  // Cluster::busy_speed (measured for these N devices; empty: not measured)
};
// The documented fallback figures for one of N logical CPU devices sharing `cores` cores (docs/planner.md).
CpuFigures fallback_cpu_figures(int n, int cores);

// Presets: "cpu:N" (figures as given), "h200x1", "h200x8", "dgx-a100-80gb" (one node) or
// "dgx-a100-80gb:N" (N nodes). Unknown names throw UserError at `where`, listing the presets.
Cluster cluster_preset(const std::string& name, const CpuFigures& cpu, const SourceLoc& where = {});
std::vector<std::string> cluster_preset_names();
bool is_cluster_preset(const std::string& name);

// The cluster file (docs/planner.md, "Cluster file"). Every mistake goes to diags with file:line:col.
Cluster parse_cluster(const std::string& text, const std::string& path, Diagnostics& diags);
Cluster read_cluster(const std::string& path, Diagnostics& diags);
// Writes a cluster file that parse_cluster reads back as the same cluster.
std::string to_yaml(const Cluster& c);

}  // namespace braid::planner
