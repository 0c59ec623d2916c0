// `braid calibrate`: measures this machine for the calibrated cost model (planner/cost_model.h) and caches
// the profile; and the one place that turns a `cpu:N` into a cost model (profile when cached, else the
// documented fallbacks), shared by `braid plan`, `braid bench` and the trainer's `plan: auto`.
// What is measured (docs/planner.md, "Calibration"): small training graphs of the shipped op families run
// through the real Executor on N worker threads at once (as Engine runs them), timed per node, giving
// per (op, shape class) the achieved fraction of the roofline and per op the backward/forward ratio; the
// memory bandwidth of N concurrent copies; alpha/beta of all_reduce, all_gather, reduce_scatter and
// send/recv on an InProcWorld of N ranks (least squares over message sizes), and of the first three for every
// smaller group size with all groups at once; the optimizer and gradient clipping per byte; each device's
// speed with 1..N busy; Engine's own per-step and per-micro-batch costs on a small MLP. Workers are
// pinned as Engine pins devices. Never writes half a profile.
#pragma once
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "planner/cost_model.h"

namespace braid::exec {

struct CalibrateOptions {
  int devices = 2;        // cpu:N
  double budget_s = 40;   // op measurements stop starting new workloads after this; the fixed measurements
                          // after them (collectives, optimizer, runner: about a minute on 2 cores) are outside it
  FILE* log = nullptr;    // one line per workload and collective; nullptr: quiet
  // A measurement during which other processes used more than a quarter core is taken again, up to this many
  // times in all (pausing 0.5, 1, 2 s); then the quietest is kept and a warning logged (after three such, the
  // rest are measured once: the machine is busy for longer than waiting helps).
  int quiet_tries = 4;
};

planner::Profile calibrate(const CalibrateOptions& o);

// $XDG_CACHE_HOME/braid/profile-<cpu model>-<cores>c-<version>.yaml (else ~/.cache/braid/...); the cpu model
// with every character other than a letter or digit replaced by '_'.
std::string profile_path();
// The cached profile, if any; a malformed one is a UserError naming its place (delete it or recalibrate).
std::optional<planner::Profile> load_profile();
// Writes `p` to profile_path() (through a temporary file and a rename); returns the path.
std::string save_profile(const planner::Profile& p);

// The cluster and cost model for `cpu:N` on this machine: the calibrated model with the cached profile's
// figures (per logical device, rescaled by min(1, cores / N) / min(1, cores / profile.devices) when the
// profile was measured for another N), else the analytic model with fallback_cpu_figures.
struct CpuModel {
  std::unique_ptr<planner::CostModel> model;
  std::string description;  // "calibrated (profile PATH, measured on cpu:4)" or "analytic (no profile: ...)"
};
CpuModel cpu_cost_model(int n);

// Devices taking turns on a core (docs/planner.md, "Turns on a core"): N workers pinned as Engine pins
// cpu:N's devices, those of a core passing a token after every training step of their MLP and after every 6;
// all-busy seconds per byte a step touches (Profile::switch_s_per_byte). 0 when every device has a core of its
// own. *bytes_out: the bytes one step of that MLP touches (3 x its parameter bytes).
double measure_turns(int devices, double* bytes_out = nullptr);

// The machine's cores (sched_getaffinity) and theoretical f32 peak of one core (cores x GHz x FLOP/cycle
// from /proc/cpuinfo, as `braid bench` reports it; 64e9 when unknown).
int machine_cores();
double core_peak_flops();
// Memory of one of n cpu devices: 80% of the machine's physical memory over the devices (calibration, cpu_cost_model).
double host_memory_share(int n);
// The cpu model from /proc/cpuinfo ("cpu" when unknown), and the braid version profiles are keyed by (main.cpp's
// --version).
std::string cpu_model();
inline constexpr const char* kProfileVersion = "0.1.0";

}  // namespace braid::exec
