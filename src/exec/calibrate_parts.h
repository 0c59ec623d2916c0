// Internals that braid calibrate's two halves share (calibrate.cpp: op efficiencies, the runner's costs and the
// profile; calibrate_machine.cpp: the machine's bandwidth, collectives, optimizer, clipping, accumulation,
// sharing and turns). Not an interface: everything here serves exec::calibrate (calibrate.h).
#pragma once
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/machine_load.h"
#include "core/parallel.h"
#include "core/stats.h"

namespace braid::exec::calib {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Runs fn(rank) on n threads at once, each with the OpenMP threads Engine gives one of `devices`
// devices (0: n).
template <typename F>
void on_workers(int n, const F& fn, int devices = 0) {
  const int per = std::max(1, num_threads() / (devices > 0 ? devices : n));
  std::vector<std::thread> ts;
  std::vector<std::exception_ptr> errs(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r)
    ts.emplace_back([&, r]() {
      pin_thread_to_share(r, devices > 0 ? devices : n);  // as Engine places its devices
      omp_set_num_threads(per);
      try {
        fn(r);
      } catch (...) {
        errs[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : ts) t.join();
  for (auto& e : errs)
    if (e) std::rethrow_exception(e);
}

// A measurement is quiet when other processes used at most this many cores' worth of the machine while it
// ran (its own threads excluded). A disturbed one is taken again, after a pause that lets a burst pass; after
// the last try the quietest is kept and counted, and calibrate() warns.
constexpr double kQuietCores = 0.25;

struct Quiet {
  FILE* log = nullptr;
  int tries = 4;          // per measurement (1 after three measurements stayed disturbed)
  int disturbed = 0;      // measurements kept although disturbed
  double worst = 0;       // the most other load among them, in cores
};

template <typename F>
auto quietly(Quiet& q, const std::string& what, const F& fn) {
  std::optional<decltype(fn())> best;
  double best_other = 0;
  for (int t = 0; t < std::max(1, q.tries); ++t) {
    if (t > 0) std::this_thread::sleep_for(std::chrono::milliseconds(250 << t));
    const CpuSample a = CpuSample::now();
    auto r = fn();
    const double other = other_cores(a, CpuSample::now());
    if (!best || other < best_other) best.emplace(std::move(r)), best_other = other;
    if (other <= kQuietCores) return std::move(*best);
    if (q.log && t + 1 < q.tries)
      std::fprintf(q.log, "  (%s: other processes used %.2f cores meanwhile; measuring again)\n", what.c_str(), other);
  }
  if (best_other > kQuietCores) {
    ++q.disturbed, q.worst = std::max(q.worst, best_other);
    // A machine busy through three measurements' tries is busy for longer than waiting can help: measure the
    // rest once each (the warning at the end says so).
    if (q.disturbed >= 3) q.tries = 1;
  }
  return std::move(*best);
}


// Model files of the workloads (calibrate.cpp): a GPT block and an MLP in-h1-h2-10.
std::string gpt(int d, int seq, int heads);
std::string mlp(int in, int h1, int h2);

// ---- the machine (calibrate_machine.cpp; formulas and measurements: docs/planner.md, "Calibration") ----------------
// Bytes per second of N concurrent 32 MiB copies (read + write), the median worker.
double measure_bandwidth(int n);
// The same over a buffer in each worker's half share of the last-level cache (cache_bytes / 2 / n, a and b half
// of it each): Profile::cache_bandwidth.
double measure_cache_bandwidth(int n);
// Every collective's alpha/beta on an InProcWorld of n ranks (and its groups), keyed as Profile::collectives;
// beta never below min_s_per_byte (fit_alpha_beta).
std::map<std::string, std::pair<double, double>> measure_collectives(int n, Quiet& quiet, double min_s_per_byte);
// Least squares of relative error (weights 1 / t^2, so small messages count as much as large ones) of
// t = c + beta x over the points (x bytes, t seconds); returns {alpha = c / steps, beta}, alpha >= 0 and
// beta >= min_s_per_byte. A collective copies every byte of its traffic at least once, so beta has a floor: the
// caller's is a read and a write at the cache bandwidth. Without it a loaded machine (the small messages slowed
// by time-slicing more than the large ones) fitted all_gather with beta 0, as if its bytes were free.
std::pair<double, double> fit_alpha_beta(const std::vector<std::pair<double, double>>& xt, double steps,
                                         double min_s_per_byte);
// The last-level cache the cores share (sysfs), and a worker's share of it among n.
double cache_bytes();
size_t cache_share_bytes(int n);
// max(1, n / cores): a device's share of a core when n devices share the machine's cores.
double core_share(int n);
// Seconds per parameter byte of an optimizer step by state count, cold (caches displaced) or warm.
std::map<int, double> measure_optimizer(int n, bool warm);
// Seconds per gradient byte of Engine's clipping, and of gradient accumulation.
double measure_clip(int n);
double measure_accumulate(int n);
// busy_speed[b - 1]: a device's speed with b of n busy, relative to all n.
std::vector<double> measure_busy_speed(int n);

}  // namespace braid::exec::calib
