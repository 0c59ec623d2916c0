// `braid calibrate` (calibrate.h): op efficiencies from per-node timing of small training graphs on N
// concurrent workers, memory bandwidth, collective alpha/beta on an InProcWorld, the optimizer's and the
// runner's own costs. The machine's figures and the profile's cache: profile_cache.cpp. Formulas:
// docs/planner.md ("Calibration").
#include "exec/calibrate.h"

#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <thread>

#include "core/machine_load.h"
#include "core/parallel.h"
#include "exec/comm/inproc.h"
#include "exec/optimizer.h"
#include "exec/pipeline.h"
#include "exec/runner.h"
#include "graph/build.h"
#include "io/dataset.h"
#include "planner/cluster.h"
#include "planner/layer_cost.h"
#include "planner/search.h"

namespace braid::exec {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Runs fn(rank) on n threads at once, each with the OpenMP threads PlanRunner gives one of `devices`
// devices (0: n).
template <typename F>
void on_workers(int n, const F& fn, int devices = 0) {
  const int per = std::max(1, num_threads() / (devices > 0 ? devices : n));
  std::vector<std::thread> ts;
  std::vector<std::exception_ptr> errs(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r)
    ts.emplace_back([&, r]() {
      pin_thread_to_share(r, devices > 0 ? devices : n);  // as PlanRunner places its devices
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

double median(std::vector<double> xs) {
  if (xs.empty()) return 0;
  std::sort(xs.begin(), xs.end());
  size_t k = xs.size() / 2;
  return xs.size() % 2 ? xs[k] : (xs[k - 1] + xs[k]) / 2;
}

// ---- op efficiencies ---------------------------------------------------------------------------------------------
struct Workload {
  std::string name, text;
  int64_t batch;
};

std::string gpt(int d, int seq, int heads) {
  return "name: gpt\nvars: {vocab: 256, seq: " + std::to_string(seq) + ", d: " + std::to_string(d) +
         ", heads: " + std::to_string(heads) +
         "}\ninputs:\n  tokens: {shape: [seq], dtype: i32}\n  targets: {shape: [seq], dtype: i32}\nlayers:\n"
         "  - {name: tok, op: embedding, from: tokens, num: vocab, dim: d}\n"
         "  - {name: pos, op: position_embedding, max_len: seq}\n"
         "  - {name: ln1, op: layer_norm}\n  - {name: attn, op: attention, heads: heads, causal: true, dropout: 0.1}\n"
         "  - {name: res1, op: add, from: [attn, pos]}\n  - {name: ln2, op: layer_norm}\n"
         "  - {name: fc, op: linear, out: 4 * d}\n  - {name: act, op: gelu, approximate: tanh}\n"
         "  - {name: proj, op: linear, out: d}\n  - {name: drop, op: dropout, p: 0.1}\n"
         "  - {name: res2, op: add, from: [drop, res1]}\n  - {name: ln_f, op: layer_norm}\n"
         "  - {name: logits, op: linear, out: vocab, bias: false}\n"
         "  - {name: loss, op: cross_entropy, from: [logits, targets]}\noutputs: [loss]\n";
}

std::string mlp(int in, int h1, int h2) {
  return "name: mlp\ninputs:\n  image: {shape: [" + std::to_string(in) +
         "]}\n  label: {shape: [], dtype: i32}\nlayers:\n  - {name: fc1, op: linear, from: image, out: " +
         std::to_string(h1) + "}\n  - {name: act1, op: relu}\n  - {name: fc2, op: linear, out: " + std::to_string(h2) +
         "}\n  - {name: act2, op: relu}\n  - {name: logits, op: linear, out: 10}\n"
         "  - {name: loss, op: cross_entropy, from: [logits, label]}\noutputs: [loss]\n";
}

std::string lenet(int c1, int c2, int hidden) {
  return "name: lenet\ninputs:\n  image: {shape: [1, 28, 28]}\n  label: {shape: [], dtype: i32}\nlayers:\n"
         "  - {name: conv1, op: conv2d, from: image, out: " + std::to_string(c1) + ", kernel: 5}\n"
         "  - {name: bn1, op: batch_norm}\n  - {name: act1, op: relu}\n  - {name: pool1, op: max_pool2d, kernel: 2}\n"
         "  - {name: conv2, op: conv2d, out: " + std::to_string(c2) + ", kernel: 5}\n"
         "  - {name: bn2, op: batch_norm}\n  - {name: act2, op: relu}\n  - {name: pool2, op: max_pool2d, kernel: 2}\n"
         "  - {name: flat, op: flatten}\n  - {name: fc1, op: linear, out: " + std::to_string(hidden) + "}\n"
         "  - {name: act3, op: relu}\n  - {name: logits, op: linear, out: 10}\n"
         "  - {name: loss, op: cross_entropy, from: [logits, label]}\noutputs: [loss]\n";
}

// Small to large, so that a tight budget still covers every op family at some size.
std::vector<Workload> workloads() {
  return {{"overhead", mlp(4, 4, 4), 1},
          {"gpt d32", gpt(32, 16, 2), 4},   {"mlp 64", mlp(784, 64, 32), 8},   {"lenet 4/8", lenet(4, 8, 32), 4},
          {"gpt d64", gpt(64, 32, 4), 4},   {"mlp 256", mlp(784, 256, 128), 32}, {"gpt d128", gpt(128, 64, 4), 4},
          {"lenet 8/16", lenet(8, 16, 128), 16}, {"mlp 1024", mlp(784, 1024, 1024), 64},
          {"gpt d256", gpt(256, 128, 4), 4}, {"gpt d128 b16", gpt(128, 64, 4), 16}};
}

struct LayerSample {
  std::string op;
  double flops = 0, bytes = 0;
  double param_bytes = 0;                // trainable parameters the layer reads (CostModel::weight_read_time)
  double forward_s = 0, backward_s = 0;  // per run, averaged over workers and runs
  bool input_grad = true;  // false: planner::weight_gradients_only (not counted in the op's backward ratio)
};

// Per forward layer of the workload's training graph: its cost and measured forward / backward seconds.
std::vector<LayerSample> measure_workload(const Workload& w, int n, double target_s) {
  Diagnostics diags;
  io::ModelSpec spec = io::parse_model(w.text, "<calibrate " + w.name + ">", {}, diags);
  diags.throw_if_any();
  std::vector<std::vector<double>> node_s(static_cast<size_t>(n));
  std::vector<int> runs(static_cast<size_t>(n), 0);
  std::vector<LayerSample> out;
  std::map<std::string, size_t> row;
  std::vector<std::pair<int, bool>> node_row;  // per node: its layer's row (-1: none), backward
  std::vector<double> warm_s(static_cast<size_t>(n));
  std::barrier sync(n);
  on_workers(n, [&](int r) {
    ParamStore store;
    auto runner = make_runner(spec, w.batch, true, store, 1, RunnerOptions{.fuse = false});
    // Refilled before every run: the memory plan reuses an input's bytes after its last reader.
    auto fill = [&]() {
      for (Tensor& t : runner->inputs) {
        if (is_float(t.dtype())) {
          float* p = t.data<float>();
          for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>((i * 7919 % 1000) / 1000.0 - 0.5);
        } else {
          t.zero();  // token 0, class 0: valid for every integer input
        }
      }
    };
    fill();
    auto& ns = node_s[static_cast<size_t>(r)];
    ns.assign(runner->g.nodes().size(), 0.0);
    auto t0 = Clock::now();
    runner->exec->run(true, 1, 0);  // warm-up: caches, page faults
    warm_s[static_cast<size_t>(r)] = std::max(1e-5, seconds_since(t0));
    // Every worker runs the same number of runs, starting together, so that all N compute throughout: a
    // worker left alone runs faster where devices share cores (the figures are those of all N busy).
    sync.arrive_and_wait();
    const double once = *std::max_element(warm_s.begin(), warm_s.end());
    const int iters = static_cast<int>(std::clamp(target_s / once, 2.0, 200.0));
    sync.arrive_and_wait();
    // The mean over the runs, not the median: with more devices than cores the OS time-slices the workers
    // (slices of milliseconds, nodes of microseconds), so most node runs see a whole core and the slices a
    // device waits land on a few; only the mean carries the device's share of the core.
    runner->exec->set_node_timing(ns.data());
    std::fill(ns.begin(), ns.end(), 0.0);
    for (int i = 0; i < iters; ++i) {
      fill();
      runner->exec->run(true, 1, static_cast<uint64_t>(i + 1));
    }
    runner->exec->set_node_timing(nullptr);
    runs[static_cast<size_t>(r)] = iters;
    if (r != 0) return;
    const graph::Graph& g = runner->g;
    for (const auto& node : g.nodes()) {
      if (node.backward) continue;
      std::vector<TensorDesc> in, o;
      for (ValueId v : node.inputs) in.push_back(g.value(v).desc);
      for (ValueId v : node.outputs) o.push_back(g.value(v).desc);
      ops::Cost c = ops::op_cost(*node.op, node.attrs, in, o);
      row.emplace(node.layer, out.size());
      out.push_back(LayerSample{node.op->name, c.flops, c.bytes});
      for (ValueId v : node.inputs)
        if (const graph::ParamInfo* pi = g.value(v).kind == graph::ValueKind::Param ? g.find_param(g.value(v).name) : nullptr;
            pi && !pi->spec.buffer)
          out.back().param_bytes += static_cast<double>(g.value(v).desc.bytes());
      out.back().input_grad = !planner::weight_gradients_only(g, node);
    }
    for (const auto& node : g.nodes()) {
      auto it = row.find(node.layer);
      node_row.emplace_back(it == row.end() ? -1 : static_cast<int>(it->second), node.backward);
    }
  });
  // Averaged over workers: every worker built the same graph, so node indices agree.
  for (size_t i = 0; i < node_row.size(); ++i) {
    auto [k, backward] = node_row[i];
    if (k < 0) continue;
    double s = 0;
    for (int r = 0; r < n; ++r) s += node_s[static_cast<size_t>(r)][i] / runs[static_cast<size_t>(r)];
    s /= n;
    (backward ? out[static_cast<size_t>(k)].backward_s : out[static_cast<size_t>(k)].forward_s) += s;
  }
  return out;
}

// ---- memory bandwidth --------------------------------------------------------------------------------------------
double measure_bandwidth(int n) {
  const size_t bytes = 32u << 20;
  std::vector<double> per(static_cast<size_t>(n));
  on_workers(n, [&](int r) {
    std::vector<char> a(bytes, 1), b(bytes, 2);
    std::memcpy(b.data(), a.data(), bytes);  // fault the pages in
    auto t0 = Clock::now();
    int reps = 0;
    while (reps < 4 || seconds_since(t0) < 0.3) {
      std::memcpy(reps % 2 ? a.data() : b.data(), reps % 2 ? b.data() : a.data(), bytes);
      ++reps;
    }
    per[static_cast<size_t>(r)] = 2.0 * static_cast<double>(bytes) * reps / seconds_since(t0);  // read + write
  });
  return median(per);
}

// ---- collectives -------------------------------------------------------------------------------------------------
// Least squares of relative error (weights 1 / t^2, so small messages count as much as large ones):
// t = c + beta x over the points; alpha = c / steps. Both clamped at >= 0.
std::pair<double, double> fit(const std::vector<std::pair<double, double>>& xt, double steps) {
  double sw = 0, sx = 0, st = 0, sxx = 0, sxt = 0;
  for (auto [x, t] : xt) {
    double w = 1 / std::max(1e-12, t * t);
    sw += w, sx += w * x, st += w * t, sxx += w * x * x, sxt += w * x * t;
  }
  double den = sw * sxx - sx * sx;
  double beta = den > 0 ? (sw * sxt - sx * st) / den : 0;
  beta = std::max(beta, 0.0);
  double c = std::max(0.0, (st - beta * sx) / sw);
  return {c / std::max(1.0, steps), beta};
}

// Seconds per call of collective `k` on every rank, for groups of g consecutive ranks of n, all at once.
double cache_bytes();
size_t cache_share_bytes(int n);

// cold: as a data-parallel gradient all-reduce runs, after a backward: before each call every rank rewrites its
// tensor (the gradients just written) and twice its share of the last-level cache of other data (the step's
// activations and weights), then they start together; the time of one call alone, not of calls back to back.
std::vector<double> time_collective(int n, const std::string& k, int g, int64_t elems, int reps, bool cold = false) {
  InProcWorld world(n);
  std::vector<double> t(static_cast<size_t>(n));
  std::vector<std::vector<double>> per_rep(cold ? static_cast<size_t>(reps) : 0, std::vector<double>(static_cast<size_t>(n)));
  on_workers(n, [&](int r) {
    auto world_comm = world.communicator(r);
    std::unique_ptr<Communicator> group;
    if (g < n) {
      std::vector<int> ranks;
      for (int q = r / g * g; q < r / g * g + g; ++q) ranks.push_back(q);
      group = world_comm->split(ranks);
    }
    Communicator* comm = g < n ? group.get() : world_comm.get();
    Tensor whole = Tensor::empty(TensorDesc{Shape{elems}, DType::f32});
    Tensor part = Tensor::empty(TensorDesc{Shape{elems / g}, DType::f32});
    auto once = [&]() {
      if (k == "all_reduce") comm->all_reduce(whole, ReduceOp::Sum);
      else if (k == "all_gather") comm->all_gather(part, whole, 0);
      else if (k == "reduce_scatter") comm->reduce_scatter(whole, part, 0);
      else if (r == 0) comm->send(whole, 1, 0), comm->recv(whole, 1, 1);
      else if (r == 1) comm->recv(whole, 0, 0), comm->send(whole, 0, 1);
    };
    once();
    world_comm->barrier();
    if (cold) {
      std::vector<char> other(2 * cache_share_bytes(n), 1);
      for (int i = 0; i < reps; ++i) {
        // Read and write every line, as ops do (a large memset's streaming stores bypass the caches).
        for (size_t j = 0; j < other.size(); j += 64) other[j] = static_cast<char>(other[j] + 1);
        std::fill(whole.data<float>(), whole.data<float>() + whole.numel(), 1e-3f * static_cast<float>(i + r));
        world_comm->barrier();
        auto t0 = Clock::now();
        once();
        per_rep[static_cast<size_t>(i)][static_cast<size_t>(r)] = seconds_since(t0);
        world_comm->barrier();  // nobody starts displacing the caches while a rank sharing its core still works
      }
      return;
    }
    auto t0 = Clock::now();
    for (int i = 0; i < reps; ++i) once();
    t[static_cast<size_t>(r)] = seconds_since(t0) / reps;
    world_comm->barrier();
  });
  if (cold) {  // a call takes until its last rank is done; the median call (a rank that misses its time slice
               // now and then, 3-7 ms on cpu:4 of 2 cores, is not what a step's median sees each time)
    std::vector<double> calls;
    for (const auto& ranks : per_rep) calls.push_back(*std::max_element(ranks.begin(), ranks.end()));
    std::fill(t.begin(), t.end(), median(calls));
  }
  return t;
}

// Collectives of groups of g consecutive ranks of n (g = n: the whole world), every group at once, as the tensor
// groups of a plan with n / g of them run theirs (PlanRunner: tensor rank t of replica r is device r g + t).
// Key "all_reduce" for g = n, "all_reduce@g" for smaller groups.
std::map<std::string, std::pair<double, double>> measure_collectives(int n, Quiet& quiet) {
  FILE* log = quiet.log;
  std::map<std::string, std::pair<double, double>> out;
  if (n < 2) return out;
  const std::vector<int64_t> sizes{4 << 10, 64 << 10, 1 << 20, 8 << 20};  // bytes of the whole tensor
  std::vector<std::pair<std::string, int>> cases;
  for (const char* kind : {"all_reduce", "all_gather", "reduce_scatter", "send_recv"}) cases.emplace_back(kind, n);
  for (int g = 2; g < n; ++g)
    if (n % g == 0)
      for (const char* kind : {"all_reduce", "all_gather", "reduce_scatter"}) cases.emplace_back(kind, g);
  // The data-parallel gradient all-reduce, every data group at once, timed cold (time_collective): "grad_all_reduce",
  // "grad_all_reduce@g". Timed back to back from cache, mlp dp 4 on cpu:4's 2.7 MB took 0.41 ms by the fit where
  // its training trace shows 1.7-1.9 ms from the last rank's arrival; timed cold, 1.6 ms.
  for (int g = 2; g <= n; ++g)
    if (n % g == 0) cases.emplace_back("grad_all_reduce", g);
  // Every (case, size) in three passes taken in turn over all of them, the median pass per point: one pass gave
  // the all-reduce of cpu:4 on 2 cores a bandwidth of 2.2 GB/s in one calibration and 7.0 in the next.
  constexpr int kPasses = 3;
  std::vector<std::vector<std::vector<double>>> secs(cases.size(), std::vector<std::vector<double>>(sizes.size()));
  for (int pass = 0; pass < kPasses; ++pass)
    for (size_t c = 0; c < cases.size(); ++c)
      for (size_t z = 0; z < sizes.size(); ++z) {
        const auto& [name, g] = cases[c];
        const bool cold = name == "grad_all_reduce";
        const std::string k = cold ? "all_reduce" : name;
        const int64_t bytes = sizes[z], elems = std::max<int64_t>(g, bytes / 4 / g * g);
        const int reps = static_cast<int>(std::clamp<int64_t>((cold ? 8 << 20 : 16 << 20) / bytes, 4, cold ? 32 : 256));
        std::vector<double> t = quietly(quiet, name + " of " + std::to_string(bytes) + " bytes",
                                        [&]() { return time_collective(n, k, g, elems, reps, cold); });
        secs[c][z].push_back(k == "send_recv" ? t[0] / 2 : *std::max_element(t.begin(), t.end()));
      }
  for (size_t c = 0; c < cases.size(); ++c) {
    const auto& [name, g] = cases[c];
    const std::string k = name == "grad_all_reduce" ? "all_reduce" : name;
    const double frac = static_cast<double>(g - 1) / g;
    std::vector<std::pair<double, double>> pts;  // (traffic per rank, seconds)
    for (size_t z = 0; z < sizes.size(); ++z) {
      const int64_t elems = std::max<int64_t>(g, sizes[z] / 4 / g * g);
      double b = static_cast<double>(elems) * 4;
      double traffic = k == "all_reduce" ? 2 * frac * b : k == "send_recv" ? b : frac * b;
      pts.emplace_back(traffic, median(secs[c][z]));
    }
    double steps = k == "all_reduce" ? 2.0 * (g - 1) : k == "send_recv" ? 1.0 : g - 1.0;
    const std::string key = g == n ? name : name + "@" + std::to_string(g);
    out[key] = fit(pts, steps);
    if (log)
      std::fprintf(log, "  %-15s alpha %8.2f us per step, beta %6.2f GB/s\n", key.c_str(), out[key].first * 1e6,
                   out[key].second > 0 ? 1e-9 / out[key].second : 0.0);
  }
  return out;
}

// ---- the optimizer -----------------------------------------------------------------------------------------------
// The last-level cache this process's cores share, in bytes: the highest level sysfs lists for cpu 0 (glibc's
// sysconf reads cpuid, which on AMD EPYC guests reports the host's total over all its CCDs: 320 MiB where
// sysfs and lscpu say 32 MiB); sysconf where sysfs is absent; 32 MiB where neither says.
double cache_bytes() {
  namespace fs = std::filesystem;
  int best_level = 0;
  double best = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/sys/devices/system/cpu/cpu0/cache", ec)) {
    if (e.path().filename().string().rfind("index", 0) != 0) continue;
    std::ifstream level_in(e.path() / "level"), size_in(e.path() / "size");
    int level = 0;
    std::string size;
    if (!(level_in >> level) || !(size_in >> size) || level <= best_level) continue;
    char* end = nullptr;
    double v = std::strtod(size.c_str(), &end);
    if (end && *end == 'K') v *= 1024;
    else if (end && *end == 'M') v *= 1024 * 1024;
    if (v > 0) best_level = level, best = v;
  }
  if (best > 0) return best;
  long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return l3 > 0 ? static_cast<double>(l3) : 32.0 * (1 << 20);
}

// In a training step of a large model the forward and backward of every device run between two optimizer steps,
// and they displace what the last step left in the caches: before each timed cold step a worker writes its share
// of the last-level cache (L3 / N bytes) of other data. Measured without it, the update of mlp 1024 ran from cache,
// 3-4x faster than the trace of a training step shows it (docs/planner.md). The bytes a worker rewrites.
size_t cache_share_bytes(int n) { return static_cast<size_t>(cache_bytes()) / static_cast<size_t>(std::max(1, n)); }

// A step's time measured alone on a core (the median of several: time slices of milliseconds seldom cut a
// step of a fraction of one) is the all-busy figure only where every device has a core; N devices on fewer
// cores take turns, so each device's step takes N / cores times as long (the op figures, means over time-sliced
// runs, carry the same factor).
double core_share(int n) { return std::max(1.0, static_cast<double>(n) / machine_cores()); }

// Seconds per parameter byte of one optimizer step (plain SGD, SGD with momentum, AdamW: 0, 1, 2 state tensors),
// on N workers at once (the median worker, the median of several steps, times the core share). Cold: over a
// 1 M-parameter MLP each, caches displaced before each step (a large model's step between two updates).
// Warm: over an MLP small enough that every worker's parameters, gradients and two states fit in half the
// last-level cache together, nothing displaced (a small model's training step leaves them there: mlp 512 on
// cpu:4 updates 2.7 MB per device in 0.4 ms inside training, 4x faster than the cold figure).
std::map<int, double> measure_optimizer(int n, bool warm) {
  int h1 = 1024, h2 = 256;
  if (warm) {
    const double target = cache_bytes() / 2 / n / (4.0 * sizeof(float));  // parameters per worker
    h1 = 16;  // the widest multiple of 16 whose mlp(784, h1, h1 / 2) stays within the target
    while (785.0 * (h1 + 16) + (h1 + 16) * (h1 + 16) / 2.0 <= target) h1 += 16;
    h2 = h1 / 2;
  }
  Diagnostics diags;
  io::ModelSpec spec = io::parse_model(mlp(784, h1, h2), "<calibrate optimizer>", {}, diags);
  diags.throw_if_any();
  std::map<int, double> out;
  for (int states : {0, 1, 2}) {
    io::OptimizerSpec os;
    os.type = states == 2 ? "adamw" : "sgd";
    os.lr = 1e-3;
    os.momentum = states == 1 ? 0.9 : 0;
    std::vector<double> per(static_cast<size_t>(n));
    on_workers(n, [&](int r) {
      ParamStore store;
      auto runner = make_runner(spec, 1, true, store, 1, RunnerOptions{.fuse = false});
      double bytes = 0;
      for (auto& e : store.entries())
        if (!e.spec.buffer) {
          e.grad.zero();
          e.has_grad = true;
          bytes += static_cast<double>(e.value.bytes());
        }
      Optimizer opt(os, store);
      opt.step(1e-3);  // states allocated, pages touched
      std::vector<char> other(warm ? 0 : cache_share_bytes(n), 1);
      std::vector<double> ts;
      for (int i = 0; i < (warm ? 21 : 9); ++i) {
        if (!warm) std::memset(other.data(), i, other.size());
        auto t0 = Clock::now();
        opt.step(1e-3);
        ts.push_back(seconds_since(t0));
      }
      per[static_cast<size_t>(r)] = median(ts) / bytes;
    });
    out[states] = median(per) * core_share(n);
  }
  return out;
}

// Seconds per gradient byte of PlanRunner's clipping (pipeline.cpp, run_step): sum_squares of the gradients,
// then scale_in_place (optimizer.h: the very functions it calls); 4 MiB of gradients on N workers at once
// (caches displaced before each run and the core share applied, as for the optimizer).
double measure_clip(int n) {
  std::vector<double> per(static_cast<size_t>(n));
  on_workers(n, [&](int r) {
    Tensor g = Tensor::empty(TensorDesc{Shape{1 << 20}, DType::f32});
    std::fill(g.data<float>(), g.data<float>() + g.numel(), 0.5f);
    std::vector<char> other(cache_share_bytes(n), 1);
    std::vector<double> ts;
    for (int i = 0; i < 10; ++i) {
      std::memset(other.data(), i, other.size());
      auto t0 = Clock::now();
      const double sq = sum_squares(g);
      scale_in_place(g, 1.0 / (1.0 + 1e-9 * sq));  // near 1: the values stay normal floats
      if (i > 0) ts.push_back(seconds_since(t0));
    }
    per[static_cast<size_t>(r)] = median(ts) / static_cast<double>(g.bytes());
  });
  return median(per) * core_share(n);
}

// Seconds per gradient byte of adding a micro-batch's gradients into the accumulated ones (exec::accumulate, as
// PlanRunner does after every backward), 2 MiB of gradients on N workers at once: the new gradient freshly
// written (as the backward leaves it), the accumulated one from before the worker rewrote its L2 (a
// micro-batch's forward and backward ran in between and used more than L2, less than L3: the models planned
// on this machine); median of 9, times the core share. The DRAM-bandwidth figure used before charged a pipeline's first stage (fc1 of the MLP, 1.6 MB of
// gradients, 4 micro-batches) 2.6 ms a step where its trace shows about 0.4 ms.
double measure_accumulate(int n) {
  std::vector<double> per(static_cast<size_t>(n));
  on_workers(n, [&](int r) {
    const TensorDesc d{Shape{1 << 19}, DType::f32};
    Tensor acc = Tensor::empty(d), grad = Tensor::empty(d);
    std::fill(acc.data<float>(), acc.data<float>() + acc.numel(), 0.25f);
    long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    std::vector<char> other(static_cast<size_t>(l2 > 0 ? l2 : 1l << 20), 1);
    std::vector<double> ts;
    for (int i = 0; i < 10; ++i) {
      std::memset(other.data(), i, other.size());  // a micro-batch's forward and backward ran in between
      std::fill(grad.data<float>(), grad.data<float>() + grad.numel(), 0.5f + 0.01f * static_cast<float>(i));
      auto t0 = Clock::now();
      accumulate(acc, grad, 0.25, false);
      if (i > 0) ts.push_back(seconds_since(t0));
    }
    per[static_cast<size_t>(r)] = median(ts) / static_cast<double>(grad.bytes());
  });
  return median(per) * core_share(n);
}

// ---- devices sharing the machine --------------------------------------------------------------------------------
// speed[b - 1] = t(N busy) / t(b busy): one training step of a GPT block (d 64, seq 32, batch 4) and an MLP
// (784-256-128, batch 32) per run, on b workers at once (each with the threads PlanRunner gives one of N
// devices), the same runs on each, started together; t = the mean run of the median worker, and of three
// sweeps over b = 1..N the median per b (one sweep gave speeds of 2.1 or 3.4 for one busy device of cpu:4 on
// 2 cores from one calibration to the next, and the pipeline simulation scales stage times by them). Cores
// shared by hyper-threads or by more devices than cores make a lone device faster than the all-busy figure.
std::vector<double> measure_busy_speed(int n) {
  Diagnostics diags;
  io::ModelSpec a = io::parse_model(gpt(64, 32, 4), "<calibrate sharing>", {}, diags);
  io::ModelSpec b = io::parse_model(mlp(784, 256, 128), "<calibrate sharing>", {}, diags);
  diags.throw_if_any();
  // The mean run of the median of `busy` workers.
  auto time_busy = [&](int busy) {
    std::vector<double> per(static_cast<size_t>(busy));
    std::barrier sync(busy);
    on_workers(
        busy,
        [&](int r) {
          ParamStore sa, sb;
          auto ra = make_runner(a, 4, true, sa, 1);
          auto rb = make_runner(b, 32, true, sb, 1);
          auto once = [&](uint64_t i) {
            for (auto* x : {ra.get(), rb.get()}) {
              for (Tensor& in : x->inputs) in.zero();  // the memory plan reuses inputs' bytes: refilled each run
              x->exec->run(true, 1, i);
            }
          };
          once(0);
          sync.arrive_and_wait();
          auto t0 = Clock::now();
          for (int i = 0; i < 15; ++i) once(static_cast<uint64_t>(i + 1));
          per[static_cast<size_t>(r)] = seconds_since(t0) / 15;  // the mean: time slices included (see above)
        },
        n);
    return median(per);
  };
  constexpr int kSweeps = 3;
  std::vector<std::vector<double>> sweeps(static_cast<size_t>(n));  // [busy - 1][sweep]
  for (int sweep = 0; sweep < kSweeps; ++sweep)
    for (int busy = 1; busy <= n; ++busy) sweeps[static_cast<size_t>(busy) - 1].push_back(time_busy(busy));
  std::vector<double> t;
  for (const auto& ts : sweeps) t.push_back(median(ts));
  std::vector<double> speed(static_cast<size_t>(n));
  for (int busy = 1; busy <= n; ++busy)
    speed[static_cast<size_t>(busy) - 1] = std::clamp(t.back() / t[static_cast<size_t>(busy) - 1], 1.0, static_cast<double>(n));
  speed.back() = 1;
  return speed;
}

// ---- devices taking turns on a core -------------------------------------------------------------------------------
// With more devices than cores, the devices pinned to one core take turns in a pipeline: a device woken by its
// neighbour's send waits until the one running on its core blocks, then starts its forward or backward with
// the other's weights and activations in the core's caches. Calibration's op figures come from workers
// that alternate only every scheduler slice (many runs each), so they hold none of that refill.
// Measured here: N workers pinned as PlanRunner pins N devices, each running a training step (forward and
// backward) of its own MLP 784-512-512-10 at batch 16; the workers of one core pass a token between them
// (blocking, as a pipeline's receive does). Alternating, each run starts after the partner's; in turns of 6,
// the last 5 runs of a turn find their own data in cache. The median worker's mean run alternating less its
// mean warm run, per byte the run touches (its parameters read by the forward and the backward, its
// gradients written: 3 x parameter bytes), in all-busy seconds (x the core share). 0 when no two devices share
// a core.
double measure_switch(int n, double* bytes_out) {
  const int cores = machine_cores();
  if (n <= cores) return 0;
  Diagnostics diags;
  io::ModelSpec spec = io::parse_model(mlp(784, 512, 512), "<calibrate turns>", {}, diags);
  diags.throw_if_any();
  constexpr int kRuns = 96, kTurn = 6;
  // Workers r and r + cores share a core (pin_thread_to_share(r, n) with n > cores puts r on CPU r % cores).
  std::vector<std::atomic<int>> token(static_cast<size_t>(cores));
  std::vector<double> extra(static_cast<size_t>(n));
  double bytes = 0;
  std::barrier sync(n);
  auto pass_once = [&]() {
    on_workers(
        n,
        [&](int r) {
          ParamStore store;
          auto runner = make_runner(spec, 16, true, store, 1, RunnerOptions{.fuse = false});
          const int core = r % cores, me = r / cores, members = (n - core + cores - 1) / cores;
          std::atomic<int>& tok = token[static_cast<size_t>(core)];
          auto run_once = [&](uint64_t i) {
            for (Tensor& in : runner->inputs) in.zero();
            auto t0 = Clock::now();
            runner->exec->run(true, 1, i);
            return seconds_since(t0);
          };
          auto wait_turn = [&]() {
            for (int t = tok.load(); t != me; t = tok.load()) tok.wait(t);
          };
          auto pass = [&]() {
            tok.store((me + 1) % members);
            tok.notify_all();
          };
          run_once(0);
          if (r == 0) {
            bytes = 3.0 * static_cast<double>(store.num_trainable()) * sizeof(float);
          }
          double alternating = 0, warm = 0;
          int warm_runs = 0;
          for (int mode = 0; mode < 2; ++mode) {
            if (r < cores) tok.store(0);
            sync.arrive_and_wait();
            const int turn = mode == 0 ? 1 : kTurn;
            for (int i = 0; i < kRuns; i += turn) {
              wait_turn();
              for (int k = 0; k < turn; ++k) {
                const double t = run_once(static_cast<uint64_t>(i + k + 1));
                if (mode == 0) alternating += t;
                else if (k > 0) warm += t, ++warm_runs;
              }
              pass();
            }
            sync.arrive_and_wait();
          }
          extra[static_cast<size_t>(r)] = alternating / kRuns - warm / std::max(1, warm_runs);
        },
        n);
    return median(extra);
  };
  // Three passes, the median: one pass of 36 runs gave 0.03 and 0.15 ms in two calibrations a minute apart.
  std::vector<double> passes;
  for (int k = 0; k < 3; ++k) passes.push_back(pass_once());
  if (bytes_out) *bytes_out = bytes;
  return bytes > 0 ? std::max(0.0, median(passes)) / bytes * core_share(n) : 0;
}

// ---- the plan runner's own costs ----------------------------------------------------------------------------------
// PlanRunner's median step time over `steps` steps (after 5 untimed) of `plan`.
double runner_step_s(const io::ModelSpec& spec, const io::OptimizerSpec& os, const planner::Plan& plan,
                     io::Dataset& data, int64_t batch, int steps) {
  PlanRunner pr(spec, os, plan, 1);
  io::BatchSampler sampler(data.size(), batch, true, 1);
  std::vector<double> ts;
  for (int i = 0; i < 5 + steps; ++i) {
    auto t0 = Clock::now();
    pr.step(data, sampler.next_view(), i, 1e-3, 1.0);
    if (i >= 5) ts.push_back(seconds_since(t0));
  }
  return median(ts);
}

// What PlanRunner's steps take beyond the model's prediction without runner costs, on a small MLP whose
// compute is short: dp N with 1 and 4 micro-batches, a pipeline of N stages with N and 4N micro-batches.
// Residual r = measured - predicted; per-micro-batch cost (one stage) = (r(dp, 4) - r(dp, 1)) / 3; in a
// pipeline = (r(pp, 4N) - r(pp, N)) / 3N (each micro-batch more adds one micro-batch's time of the slowest
// stage); per step = r(dp, 1) - the per-micro-batch cost. Clamped at >= 0.
planner::Profile::Runner measure_runner(int n, const planner::Profile& p, Quiet& quiet) {
  FILE* log = quiet.log;
  planner::Profile::Runner out;
  if (n < 2) return out;
  Diagnostics diags;
  io::ModelSpec spec = io::parse_model(mlp(64, 64, 64), "<calibrate runner>", {}, diags);
  diags.throw_if_any();
  const int64_t batch = 8 * n;
  io::OptimizerSpec os;
  os.type = "sgd";
  os.lr = 1e-3;
  os.momentum = 0.9;
  planner::CpuFigures f = p.cpu;
  f.cores = machine_cores();
  f.busy_speed = p.busy_speed;
  planner::Profile bare = p;
  bare.runner = {};
  auto model = planner::calibrated_cost_model(planner::cluster_preset("cpu:" + std::to_string(n), f), bare);
  const graph::Graph fwd = graph::build_graph(spec, batch, {});
  graph::BuildOptions bo;
  bo.with_backward = true;
  const graph::Graph g = graph::build_graph(spec, 1, bo);
  io::DataSourceSpec ds;
  ds.format = "synthetic";
  ds.samples = 16 * batch;
  auto data = io::open_dataset(ds, dataset_inputs(spec, g), 1);
  planner::TrainSettings ts;
  ts.batch = batch;
  ts.optimizer_states = 1;
  auto residual = [&](int dp, int pp, int64_t m) {
    planner::Plan pins;
    pins.summary.data_parallel = dp;
    pins.summary.pinned.set("data_parallel", {});
    pins.summary.pipeline_stages = pp;
    pins.summary.pinned.set("pipeline_stages", {});
    pins.summary.tensor_parallel = 1;
    pins.summary.pinned.set("tensor_parallel", {});
    pins.summary.micro_batches = m;
    pins.summary.pinned.set("micro_batches", {});
    pins.summary.schedule = "1f1b";
    pins.summary.pinned.set("schedule", {});
    planner::SearchOptions so;
    so.pins = &pins;
    planner::SearchResult r = planner::search(fwd, *model, ts, so);
    if (!r.found) throw InternalError("calibrate: no plan for the runner workload: " + r.why_none);
    double measured = quietly(quiet, "runner dp " + std::to_string(dp) + " x pp " + std::to_string(pp),
                              [&]() { return runner_step_s(spec, os, r.plan, *data, batch, 40); });
    if (log)
      std::fprintf(log, "  runner dp %d x pp %d, %lld micro-batches: %.3f ms, predicted %.3f ms without runner costs\n",
                   dp, pp, static_cast<long long>(m), measured * 1e3, r.prediction.step_time_s * 1e3);
    return measured - r.prediction.step_time_s;
  };
  const double dp1 = residual(n, 1, 1), dp4 = residual(n, 1, 4);
  const double pp1 = residual(1, n, n), pp4 = residual(1, n, 4 * n);
  out.micro_batch_overhead = std::max(0.0, (dp4 - dp1) / 3);
  out.pipeline_micro_batch_overhead = std::max(0.0, (pp4 - pp1) / (3.0 * n));
  out.step_overhead = std::max(0.0, dp1 - out.micro_batch_overhead);
  return out;
}

// Each layer's forward and backward: the median over a workload's passes of the passes' means.
std::vector<LayerSample> median_of_passes(const std::vector<std::vector<LayerSample>>& passes, const Workload& w) {
  std::vector<LayerSample> out = passes.at(0);
  for (size_t i = 0; i < out.size(); ++i) {
    std::vector<double> f, b;
    for (const auto& pass : passes) {
      BRAID_ASSERT(pass.size() == out.size() && pass[i].op == out[i].op, "calibration workload ", w.name, " changed");
      f.push_back(pass[i].forward_s);
      b.push_back(pass[i].backward_s);
    }
    out[i].forward_s = median(f);
    out[i].backward_s = median(b);
  }
  return out;
}

}  // namespace

double measure_turns(int devices, double* bytes_out) { return measure_switch(devices, bytes_out); }

planner::Profile calibrate(const CalibrateOptions& o) {
  if (o.devices < 1) throw UserError(SourceLoc{"<command line>", 0, 0}, "--devices must be cpu:N with N >= 1");
  const int n = o.devices, cores = machine_cores();
  Quiet quiet{o.log, o.quiet_tries};
  planner::Profile p;
  p.machine = cpu_model() + " x " + std::to_string(cores) + " cores";
  p.braid_version = kProfileVersion;
  p.devices = n;
  // 1. Device figures: the theoretical peak of the device's share of the cores; measured bandwidth.
  p.cpu.peak_flops_f32 = core_peak_flops() * cores / n;
  p.cpu.memory_bandwidth = quietly(quiet, "memory bandwidth", [&]() { return measure_bandwidth(n); });
  p.cpu.memory_bytes = 0.8 * static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE)) / n;
  if (o.log)
    std::fprintf(o.log, "braid calibrate: cpu:%d on %s; peak %.1f GFLOP/s per device (theoretical), memory %.1f GB/s "
                 "per device (measured)\n", n, p.machine.c_str(), p.cpu.peak_flops_f32 / 1e9, p.cpu.memory_bandwidth / 1e9);
  // 2. Ops: per (op, shape class) the roofline time over the measured time less the per-op overhead.
  auto start = Clock::now();
  std::map<std::string, std::map<std::string, std::pair<double, double>>> eff;  // op -> class -> (roof, time)
  std::map<std::string, std::pair<double, double>> ratio;                     // op -> (backward, forward)
  double overhead = 5e-6;
  std::vector<double> overhead_passes;  // the overhead workload's median node time, per pass
  const double peak = p.cpu.peak_flops_f32, bw = p.cpu.memory_bandwidth;
  // A layer's forward packs its weights (the GEMM reads them and writes the packed copy); where the step before
  // left them in memory, not in cache, that is their bytes read and written at the bandwidth measured above
  // (which counts both): fc2 of the MLP 784-1024-1024-10 alone on one core forwards M rows in
  // 0.60 ms + M x 0.020 ms for M = 32..256, and 0.60 ms is its 4 MiB read and written at the 13.6 GB/s of one
  // core (cpu:4's 6.8 GB/s per device, two per core). The model charges it once per step and stage, for the
  // part of the weights the cache did not keep (CostModel::weight_read_time); the fit below takes it out of
  // the workloads' forward samples the same way. Without it plans of 32 rows per replica on the MLP
  // 784-1024-1024-10 were predicted 33-42% fast, of 128 rows 5% (docs/planner.md).
  const double weight_s_per_byte = bw > 0 ? 2 / bw : 0;
  p.weight_s_per_byte = weight_s_per_byte;
  p.cache_bytes = cache_bytes();
  // Every workload in kPasses passes of 0.2 s, each layer's times the median of the passes' means, the passes
  // taken in turn over all workloads: a time slice of several milliseconds that a worker waits lands on one node
  // of one pass, and a slow spell of the host (this VM's neighbours slow everything by 20-60% for seconds at a
  // time, unseen by other_cores) on one pass of several workloads, moving those passes' means, not the medians.
  // With one pass of 0.4 s two calibrations minutes apart differed by up to 5x in some (op, class) figures and
  // backward ratios (cross_entropy 1e6: 0.64 and 0.13; embedding's ratio 0.32 and 5.6); with three passes of a
  // workload back to back, the prediction of mlp tp 2 on cpu:2 ranged over 2.3-3.5 ms in six calibrations.
  constexpr int kPasses = 3;
  const std::vector<Workload> all = workloads();
  std::vector<std::vector<std::vector<LayerSample>>> passes(all.size());  // [workload][pass]
  std::vector<double> spent(all.size());
  size_t measured = all.size();
  for (int k = 0; k < kPasses; ++k)
    for (size_t i = 0; i < measured; ++i) {
      const Workload& w = all[i];
      if (w.name == "overhead") {
        // In every pass like the workloads, the median pass kept: measured once, it came out 0.45, 1.47, 2.13
        // and 0.45 us in four calibrations of one hour, and tiny_gpt's pipelines (hundreds of small ops a step)
        // were predicted 8.0-9.2 ms with it.
        std::vector<double> ts;
        for (const auto& r : quietly(quiet, w.name, [&]() { return measure_workload(w, n, 0.05); }))
          ts.push_back(r.forward_s);
        overhead_passes.push_back(std::max(1e-7, median(ts)));
        overhead = median(overhead_passes);
        if (o.log && k + 1 == kPasses) std::fprintf(o.log, "  %-15s %.2f us per op\n", "op overhead", overhead * 1e6);
        continue;
      }
      if (k == 0 && seconds_since(start) * kPasses > o.budget_s) {
        if (o.log) std::fprintf(o.log, "  (budget of %.0f s: later workloads skipped)\n", o.budget_s);
        measured = i;
        break;
      }
      auto t0 = Clock::now();
      passes[i].push_back(quietly(quiet, w.name, [&]() { return measure_workload(w, n, 0.2); }));
      spent[i] += seconds_since(t0);
    }
  for (size_t i = 0; i < measured; ++i) {
    const Workload& w = all[i];
    if (passes[i].empty()) continue;  // the overhead
    const std::vector<LayerSample> rows = median_of_passes(passes[i], w);
    // The workload's runs follow one another: its weights come from memory for the part of the N workers'
    // weights and gradients that does not fit in half the cache (as CostModel::weight_read_time, no states).
    double workload_params = 0;
    for (const auto& r : rows) workload_params += r.param_bytes;
    const double cold =
        workload_params > 0 ? 1 - std::min(1.0, 0.5 * p.cache_bytes / (2 * workload_params * n)) : 0;
    for (const auto& r : rows) {
      if (r.forward_s <= 0) continue;
      double roof = std::max(r.flops / peak, r.bytes / bw);
      // The model's forward: overhead + roof / efficiency, plus weight_read_time once per step; its backward:
      // the ratio x that forward. The fit inverts both.
      const double weights = cold * r.param_bytes * weight_s_per_byte;
      const double forward = std::max(r.forward_s - weights, 0.05 * r.forward_s);
      auto& e = eff[r.op][planner::shape_class(r.flops)];
      e.first += roof;
      e.second += std::max(forward - overhead, 0.05 * r.forward_s);
      if (r.backward_s > 0 && r.input_grad) ratio[r.op].first += r.backward_s, ratio[r.op].second += forward;
    }
    if (o.log) std::fprintf(o.log, "  %-15s batch %-4lld %.1f s\n", w.name.c_str(), static_cast<long long>(w.batch), spent[i]);
  }
  p.cpu.op_overhead = overhead;
  for (const auto& [op, classes] : eff)
    for (const auto& [cls, rt] : classes)
      if (rt.second > 0) p.efficiency[op][cls] = std::min(100.0, rt.first / rt.second);  // > 1: OpDef::cost overcounts
  for (const auto& [op, bf] : ratio)
    if (bf.second > 0) p.backward_ratio[op] = bf.first / bf.second;
  // 3. Collectives and point to point on the in-process backend.
  p.collectives = measure_collectives(n, quiet);
  if (auto it = p.collectives.find("send_recv"); it != p.collectives.end()) {
    p.cpu.link_latency = it->second.first;
    p.cpu.link_bandwidth = it->second.second > 0 ? 1 / it->second.second : 5e9;
  } else {
    planner::CpuFigures f = planner::fallback_cpu_figures(n, cores);
    p.cpu.link_latency = f.link_latency;
    p.cpu.link_bandwidth = f.link_bandwidth;
  }
  // 4. The optimizer's update per parameter byte; the plan runner's own costs (with the figures above).
  p.optimizer_s_per_byte = quietly(quiet, "optimizer", [&]() { return measure_optimizer(n, false); });
  p.optimizer_warm_s_per_byte = quietly(quiet, "optimizer (warm)", [&]() { return measure_optimizer(n, true); });
  if (o.log)
    for (const auto& [k, v] : p.optimizer_s_per_byte)
      std::fprintf(o.log, "  optimizer, %d states: %.3f ns per parameter byte from memory, %.3f from cache\n", k,
                   v * 1e9, p.optimizer_warm_s_per_byte[k] * 1e9);
  p.clip_s_per_byte = quietly(quiet, "gradient clipping", [&]() { return measure_clip(n); });
  if (o.log) std::fprintf(o.log, "  gradient clipping: %.3f ns per gradient byte\n", p.clip_s_per_byte * 1e9);
  p.accumulate_s_per_byte = quietly(quiet, "gradient accumulation", [&]() { return measure_accumulate(n); });
  if (o.log)
    std::fprintf(o.log, "  gradient accumulation: %.3f ns per gradient byte\n", p.accumulate_s_per_byte * 1e9);
  p.busy_speed = quietly(quiet, "busy speed", [&]() { return measure_busy_speed(n); });
  double turn_bytes = 0;
  p.switch_s_per_byte = quietly(quiet, "turns on a core", [&]() { return measure_switch(n, &turn_bytes); });
  if (o.log && p.switch_s_per_byte > 0)
    std::fprintf(o.log, "  devices taking turns on a core: %.3f ns per byte (%.3f ms per micro-batch of the %.1f MB MLP)\n",
                 p.switch_s_per_byte * 1e9, p.switch_s_per_byte * turn_bytes * 1e3, turn_bytes / 1e6);
  if (o.log) {
    std::fprintf(o.log, "  speed with 1..%d devices busy, relative to all:", n);
    for (double x : p.busy_speed) std::fprintf(o.log, " %.2f", x);
    std::fprintf(o.log, "\n");
  }
  p.runner = measure_runner(n, p, quiet);
  if (o.log && n > 1)
    std::fprintf(o.log, "  runner: %.1f us per step, %.1f us per micro-batch and stage (%.1f us in a pipeline)\n",
                 p.runner.step_overhead * 1e6, p.runner.micro_batch_overhead * 1e6,
                 p.runner.pipeline_micro_batch_overhead * 1e6);
  if (o.log && quiet.disturbed > 0)
    std::fprintf(o.log, "braid calibrate: warning: %d measurement%s ran beside other processes (up to %.1f cores' worth) "
                 "however often measured; figures from a busy machine make the planner's predictions slow: calibrate "
                 "again when the machine is quiet\n", quiet.disturbed, quiet.disturbed == 1 ? "" : "s", quiet.worst);
  return p;
}

}  // namespace braid::exec
