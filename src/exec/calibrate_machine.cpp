// braid calibrate's measurements of the machine (calibrate_parts.h): memory bandwidth, the collectives' alpha
// and beta on an InProcWorld, the optimizer's update cold and warm, gradient clipping and accumulation, the
// speed of a device as others idle, and devices taking turns on a core. Formulas: docs/planner.md
// ("Calibration").
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "exec/calibrate.h"
#include "exec/calibrate_parts.h"
#include "exec/comm/inproc.h"
#include "backends/cpu/optimizer.h"
#include "backends/cpu/cpu_graph.h"

namespace braid::exec::calib {

// ---- memory bandwidth --------------------------------------------------------------------------------------------
namespace {
double copy_bandwidth(int n, size_t bytes) {
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
}  // namespace

// Buffers of 32 MiB, or of the whole last-level cache where that is larger (a VM may report its host's 300 MiB
// L3: copies of 32 MiB then run in cache, and "memory" would be measured faster than the cache itself).
double measure_bandwidth(int n) { return copy_bandwidth(n, std::max<size_t>(32u << 20, static_cast<size_t>(cache_bytes()))); }

double measure_cache_bandwidth(int n) {
  const size_t share = static_cast<size_t>(cache_bytes() / 2 / std::max(1, n));
  return copy_bandwidth(n, std::max<size_t>(share / 2, 4096));
}

// ---- collectives -------------------------------------------------------------------------------------------------
namespace {

// Seconds per call of collective `k` on every rank, for groups of g consecutive ranks of n, all at once.

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
// groups of a plan with n / g of them run theirs (Engine: tensor rank t of replica r is device r g + t).
// Key "all_reduce" for g = n, "all_reduce@g" for smaller groups.
}  // namespace

std::pair<double, double> fit_alpha_beta(const std::vector<std::pair<double, double>>& xt, double steps,
                                         double min_s_per_byte) {
  double sw = 0, sx = 0, st = 0, sxx = 0, sxt = 0;
  for (auto [x, t] : xt) {
    double w = 1 / std::max(1e-12, t * t);
    sw += w, sx += w * x, st += w * t, sxx += w * x * x, sxt += w * x * t;
  }
  if (sw == 0) return {0, std::max(0.0, min_s_per_byte)};
  double den = sw * sxx - sx * sx;
  double beta = den > 0 ? (sw * sxt - sx * st) / den : 0;
  beta = std::max({beta, min_s_per_byte, 0.0});
  double c = std::max(0.0, (st - beta * sx) / sw);  // the best intercept for that slope
  return {c / std::max(1.0, steps), beta};
}

std::map<std::string, std::pair<double, double>> measure_collectives(int n, Quiet& quiet, double min_s_per_byte) {
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
    out[key] = fit_alpha_beta(pts, steps, min_s_per_byte);
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
      auto runner = make_cpu_graph(spec, 1, true, store, 1, CpuGraphOptions{.fuse = false});
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

// Seconds per gradient byte of Engine's clipping (pipeline.cpp, run_step): sum_squares of the gradients,
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
// Engine does after every backward), 2 MiB of gradients on N workers at once: the new gradient freshly
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
// (784-256-128, batch 32) per run, on b workers at once (each with the threads Engine gives one of N
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
          auto ra = make_cpu_graph(a, 4, true, sa, 1);
          auto rb = make_cpu_graph(b, 32, true, sb, 1);
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

}  // namespace braid::exec::calib

namespace braid::exec {

using namespace calib;

// ---- devices taking turns on a core -------------------------------------------------------------------------------
// With more devices than cores, the devices pinned to one core take turns in a pipeline: a device woken by its
// neighbour's send waits until the one running on its core blocks, then starts its forward or backward with
// the other's weights and activations in the core's caches. Calibration's op figures come from workers
// that alternate only every scheduler slice (many runs each), so they hold none of that refill.
// Measured here: N workers pinned as Engine pins N devices, each running a training step (forward and
// backward) of its own MLP 784-512-512-10 at batch 16; the workers of one core pass a token between them
// (blocking, as a pipeline's receive does). Alternating, each run starts after the partner's; in turns of 6,
// the last 5 runs of a turn find their own data in cache. The median worker's mean run alternating less its
// mean warm run, per byte the run touches (its parameters read by the forward and the backward, its
// gradients written: 3 x parameter bytes), in all-busy seconds (x the core share). 0 when no two devices share
// a core.
double measure_turns(int n, double* bytes_out) {
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
          auto runner = make_cpu_graph(spec, 16, true, store, 1, CpuGraphOptions{.fuse = false});
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

}  // namespace braid::exec
