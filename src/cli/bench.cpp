// braid bench / braid time: run exec::bench() and report. The formulas (windows, FLOPs, MFU, the CPU peak)
// are stated in docs/benchmarks.md and must match the code here. Peak RSS is the process's high-water mark
// (getrusage), so with several runs in one process a row's figure includes the runs before it.
#include <immintrin.h>
#include <sched.h>
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "core/machine_load.h"
#include "exec/bench.h"
#include "io/json.h"
#include "io/run_config.h"

namespace braid::cli {
namespace {

const SourceLoc kCmdLine{"<command line>", 0, 0};

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string mib(double bytes) { return fmt("%.1f MiB", bytes / (1024.0 * 1024.0)); }

// Quantile q of sorted xs with linear interpolation between closest ranks (numpy's default).
double quantile(const std::vector<double>& xs, double q) {
  if (xs.empty()) return 0;
  double pos = q * static_cast<double>(xs.size() - 1);
  size_t lo = static_cast<size_t>(std::floor(pos));
  size_t hi = std::min(lo + 1, xs.size() - 1);
  return xs[lo] + (xs[hi] - xs[lo]) * (pos - static_cast<double>(lo));
}

// The CPU's fp32 peak: cores x clock x FLOPs per cycle per core.
struct CpuPeak {
  int cores = 0;
  double ghz = 0;
  int flops_per_cycle = 0;
  double gflops = 0;
  std::string source;  // how it was obtained
};

// The fp32 FMA throughput of the cores: one thread per core at once, each running 12 independent chains of fused
// multiply-adds in the widest vector unit the CPU has (AVX-512, else AVX2 + FMA) for about `seconds` of its own CPU
// time; the median thread's FLOPs per CPU second x the cores (so other processes' load does not lower it). The cores' boost clock and the width of their FMA pipes are in it, which the flags
// and /proc/cpuinfo's nominal "cpu MHz" cannot say (a Zen 4 core runs a 512-bit FMA as two halves, a Zen 5 core
// does not; a VM shows the nominal clock). 0 without AVX2 + FMA.
namespace {
// This thread's CPU time: the chains' rate per second of a core, whatever else the machine runs.
double thread_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// One thread's chains, written once per vector width (the loop must be compiled for its ISA, so a macro, not a
// template called from a target function).
#define BRAID_FMA_CHAINS(NAME, TARGET, V, W, FMA, SET)                                              \
  __attribute__((target(TARGET))) double NAME(double seconds) {                                     \
    V acc[12];                                                                                      \
    for (int i = 0; i < 12; ++i) acc[i] = SET(1.0f + 1e-3f * static_cast<float>(i));               \
    const V a = SET(0.999999f), b = SET(1e-7f);                                                     \
    long long rounds = 0;                                                                           \
    const double t0 = thread_seconds();                                                             \
    double elapsed = 0;                                                                             \
    do {                                                                                            \
      for (int r = 0; r < 65536; ++r)                                                               \
        for (int i = 0; i < 12; ++i) acc[i] = FMA(acc[i], a, b);                                    \
      rounds += 65536;                                                                              \
      elapsed = thread_seconds() - t0;                                                              \
    } while (elapsed < seconds);                                                                    \
    alignas(64) float out[W];                                                                       \
    float keep = 0;                                                                                 \
    for (int i = 0; i < 12; ++i) {                                                                  \
      std::memcpy(out, &acc[i], sizeof out);                                                        \
      keep += out[0];                                                                               \
    }                                                                                               \
    volatile float sink = keep;                                                                     \
    (void)sink;                                                                                     \
    return static_cast<double>(rounds) * 12 * W * 2 / elapsed;                                      \
  }
BRAID_FMA_CHAINS(chains512, "avx512f", __m512, 16, _mm512_fmadd_ps, _mm512_set1_ps)
BRAID_FMA_CHAINS(chains256, "avx2,fma", __m256, 8, _mm256_fmadd_ps, _mm256_set1_ps)
#undef BRAID_FMA_CHAINS

double measured_fma_flops(int threads, double seconds, const char** isa) {
  const bool w512 = __builtin_cpu_supports("avx512f");
  if (!w512 && !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) return 0;
  *isa = w512 ? "avx512f" : "avx2+fma";
  std::vector<double> got(static_cast<size_t>(threads));
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&, t] { got[static_cast<size_t>(t)] = w512 ? chains512(seconds) : chains256(seconds); });
  for (auto& t : ts) t.join();
  std::sort(got.begin(), got.end());
  return got[got.size() / 2] * threads;
}
}  // namespace

// The peak that MFU divides by: --peak-gflops, else the FMA throughput measured above on the CPUs this process may
// run on (sched_getaffinity), with the nominal figure beside it: cores x /proc/cpuinfo's first "cpu MHz" x FLOPs
// per cycle from the flags (fma + avx2, also with avx512f: 32; avx: 16; else 8). Where nothing can be measured,
// the nominal figure.
CpuPeak detect_peak(double override_gflops) {
  CpuPeak p;
  if (override_gflops > 0) {
    p.gflops = override_gflops;
    p.source = "--peak-gflops";
    return p;
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  p.cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  std::ifstream f("/proc/cpuinfo");
  std::string line, flags;
  while (std::getline(f, line)) {
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    if (key == "cpu MHz" && p.ghz == 0) p.ghz = std::atof(line.c_str() + colon + 1) / 1000.0;
    if (key == "flags" && flags.empty()) flags = " " + line.substr(colon + 1) + " ";
  }
  auto has = [&](const char* fl) { return flags.find(" " + std::string(fl) + " ") != std::string::npos; };
  p.flops_per_cycle = has("fma") && has("avx2") ? 32 : has("avx") ? 16 : 8;
  const double nominal = p.cores * p.ghz * p.flops_per_cycle;
  const std::string nominal_s = p.ghz == 0 ? std::string("nominal unknown: no 'cpu MHz' in /proc/cpuinfo")
                                           : "nominal " + std::to_string(p.cores) + " cores x " + fmt("%.2f", p.ghz) +
                                                 " GHz x " + std::to_string(p.flops_per_cycle) + " = " + fmt("%.1f", nominal);
  const char* isa = "";
  const double measured = measured_fma_flops(p.cores, 0.05, &isa) / 1e9;
  if (measured > 0) {
    p.gflops = measured;
    p.source = "measured: " + std::to_string(p.cores) + " threads of " + isa + " FMA chains; " + nominal_s;
  } else {
    p.gflops = nominal;
    p.source = p.ghz == 0 ? "unknown (no 'cpu MHz' in /proc/cpuinfo; pass --peak-gflops)" : nominal_s;
  }
  return p;
}

struct Sweep {
  std::string key;
  std::vector<std::string> values;
};

Sweep parse_sweep(const std::string& s) {
  auto eq = s.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == s.size())
    throw UserError(kCmdLine, "--sweep '" + s + "': expected KEY=V1,V2,...", "e.g. --sweep train.batch=64,128,256");
  Sweep w{s.substr(0, eq), {}};
  std::stringstream vs(s.substr(eq + 1));
  std::string v;
  while (std::getline(vs, v, ','))
    if (!v.empty()) w.values.push_back(v);
  if (w.values.empty()) throw UserError(kCmdLine, "--sweep '" + s + "' has no values");
  return w;
}

// Every combination of the sweeps' values, as lists of "key=value" overrides (one empty list: no sweeps).
std::vector<std::vector<std::string>> sweep_points(const std::vector<Sweep>& sweeps) {
  std::vector<std::vector<std::string>> pts{{}};
  for (const auto& w : sweeps) {
    std::vector<std::vector<std::string>> next;
    for (const auto& p : pts)
      for (const auto& v : w.values) {
        auto q = p;
        q.push_back(w.key + "=" + v);
        next.push_back(q);
      }
    pts = std::move(next);
  }
  return pts;
}

struct Row {
  std::string run, sweep;
  exec::BenchResult r;
  std::vector<double> window_sps;  // samples/s of each window
  double sps_median = 0, sps_min = 0, sps_max = 0, sps_p25 = 0, sps_p75 = 0;
  double step_ms_median = 0, flops_per_s = 0, mfu = 0;
  long peak_rss_bytes = 0;
  double other_cores = 0;  // other processes' use of the machine during the run (core/machine_load.h)
};

Row summarise(std::string run, std::string sweep, exec::BenchResult r, int64_t window, const CpuPeak& peak) {
  Row w;
  w.run = std::move(run);
  w.sweep = std::move(sweep);
  const size_t k = static_cast<size_t>(std::max<int64_t>(1, window));
  const size_t n = r.step_s.size();
  const size_t nwin = std::max<size_t>(1, n / k);
  const size_t per = n < k ? n : k;
  for (size_t i = 0; i < nwin; ++i) {
    double t = 0;
    for (size_t j = i * per; j < (i + 1) * per; ++j) t += r.step_s[j];
    w.window_sps.push_back(t > 0 ? static_cast<double>(per * static_cast<size_t>(r.batch)) / t : 0);
  }
  auto s = w.window_sps;
  std::sort(s.begin(), s.end());
  w.sps_median = quantile(s, 0.5);
  w.sps_p25 = quantile(s, 0.25);
  w.sps_p75 = quantile(s, 0.75);
  w.sps_min = s.front();
  w.sps_max = s.back();
  auto st = r.step_s;
  std::sort(st.begin(), st.end());
  w.step_ms_median = 1e3 * quantile(st, 0.5);
  w.flops_per_s = r.train_flops_per_step * w.sps_median / static_cast<double>(r.batch);
  // On a GPU its dense bf16 peak (exec::BenchResult::device_peak_flops), else the CPU's.
  const double peak_flops = r.device.empty() ? peak.gflops * 1e9 : r.device_peak_flops;
  w.mfu = peak_flops > 0 ? w.flops_per_s / peak_flops : 0;
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  w.peak_rss_bytes = ru.ru_maxrss * 1024L;  // Linux reports KiB
  w.r = std::move(r);
  return w;
}

const char* kCsvHeader =
    "run,sweep,model,batch,micro_batch,threads,steps,warmup,window,samples_per_s_median,samples_per_s_min,"
    "samples_per_s_max,samples_per_s_p25,samples_per_s_p75,tokens_per_sample,tokens_per_s_median,step_ms_median,"
    "train_flops_per_step,achieved_gflops,peak_gflops,mfu,peak_rss_bytes,arena_bytes,workspace_bytes,params,devices,"
    "data_parallel,predicted_step_ms,plan,other_load_cores\n";

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string o = "\"";
  for (char c : s) o += c == '"' ? std::string("\"\"") : std::string(1, c);
  return o + "\"";
}

std::string csv_row(const Row& w, const BenchArgs& a, const CpuPeak& p) {
  const auto& r = w.r;
  std::string s = csv_field(w.run) + "," + csv_field(w.sweep) + "," + csv_field(r.model);
  auto add = [&](const std::string& v) { s += "," + v; };
  add(std::to_string(r.batch));
  add(std::to_string(r.micro_batch));
  add(std::to_string(r.threads));
  add(std::to_string(a.steps));
  add(std::to_string(a.warmup));
  add(std::to_string(a.window));
  for (double v : {w.sps_median, w.sps_min, w.sps_max, w.sps_p25, w.sps_p75}) add(fmt("%.2f", v));
  add(std::to_string(r.tokens_per_sample));
  add(fmt("%.1f", w.sps_median * static_cast<double>(r.tokens_per_sample)));
  add(fmt("%.3f", w.step_ms_median));
  add(fmt("%.6g", r.train_flops_per_step));
  add(fmt("%.3f", w.flops_per_s / 1e9));
  add(fmt("%.1f", r.device.empty() ? p.gflops : r.device_peak_flops / 1e9));
  add(fmt("%.4f", w.mfu));
  add(std::to_string(w.peak_rss_bytes));
  add(std::to_string(r.arena_bytes));
  add(std::to_string(r.workspace_bytes));
  add(std::to_string(r.params));
  add(csv_field(r.devices));
  add(std::to_string(r.data_parallel));
  add(r.predicted_step_s > 0 ? fmt("%.3f", 1e3 * r.predicted_step_s) : "");
  add(csv_field(r.plan));
  add(fmt("%.2f", w.other_cores));
  return s + "\n";
}

void write_file(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary);
    if (!f || !(f << text) || !f.flush()) throw UserError(SourceLoc{path, 0, 0}, "cannot write this file");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw UserError(SourceLoc{path, 0, 0}, "cannot write this file");
}

std::string json_doc(const std::vector<Row>& rows, const BenchArgs& a, const CpuPeak& p) {
  io::JsonWriter j(2);
  j.begin_object();
  j.key("peak").begin_object().field("gflops", p.gflops).field("cores", p.cores).field("ghz", p.ghz);
  j.field("flops_per_cycle", p.flops_per_cycle).field("source", p.source).end_object();
  j.field("steps", a.steps).field("warmup", a.warmup).field("window", a.window);
  j.key("rows").begin_array();
  for (const auto& w : rows) {
    const auto& r = w.r;
    j.begin_object().field("run", w.run).field("sweep", w.sweep).field("model", r.model);
    j.field("batch", r.batch).field("micro_batch", r.micro_batch).field("threads", r.threads);
    j.field("samples_per_s_median", w.sps_median).field("samples_per_s_min", w.sps_min);
    j.field("samples_per_s_max", w.sps_max).field("samples_per_s_p25", w.sps_p25).field("samples_per_s_p75", w.sps_p75);
    j.field("tokens_per_sample", r.tokens_per_sample);
    j.field("tokens_per_s_median", w.sps_median * static_cast<double>(r.tokens_per_sample));
    j.field("step_ms_median", w.step_ms_median).field("train_flops_per_step", r.train_flops_per_step);
    j.field("achieved_gflops", w.flops_per_s / 1e9).field("mfu", w.mfu);
    j.field("peak_rss_bytes", w.peak_rss_bytes).field("arena_bytes", r.arena_bytes);
    j.field("workspace_bytes", r.workspace_bytes).field("params", r.params);
    j.field("devices", r.devices).field("data_parallel", r.data_parallel);
    j.field("other_load_cores", w.other_cores);
    if (!r.plan.empty()) j.field("plan", r.plan).field("predicted_step_ms", 1e3 * r.predicted_step_s);
    if (!r.device.empty()) j.field("device", r.device).field("device_peak_gflops", r.device_peak_flops / 1e9);
    j.key("window_samples_per_s").begin_array();
    for (double v : w.window_sps) j.value(v);
    j.end_array();
    j.key("step_ms").begin_array();
    for (double v : r.step_s) j.value(v * 1e3);
    j.end_array().end_object();
  }
  j.end_array().end_object();
  return j.str() + "\n";
}

void check_counts(int64_t steps, int64_t warmup) {
  if (steps < 1) throw UserError(kCmdLine, "--steps must be at least 1");
  if (warmup < 0) throw UserError(kCmdLine, "--warmup must not be negative");
}

io::RunConfig load_run(const std::string& path, const std::vector<std::string>& sets) {
  io::RunConfig cfg = io::load_run_or_model(path, sets);
  if (cfg.is_model_only)
    throw UserError(SourceLoc{path, 1, 1}, "this is a model file; braid bench and braid time need a run file",
                    "write a run file with `model: " + path + "` and data, train and optimizer sections");
  return cfg;
}

}  // namespace

int bench(const BenchArgs& a, FILE* out) {
  check_counts(a.steps, a.warmup);
  if (a.window < 1) throw UserError(kCmdLine, "--window must be at least 1");
  std::vector<Sweep> sweeps;
  for (const auto& s : a.sweeps) sweeps.push_back(parse_sweep(s));
  const auto points = sweep_points(sweeps);
  const CpuPeak peak = detect_peak(a.peak_gflops);
  std::fprintf(out, "braid bench: %lld warmup + %lld timed steps per run, windows of %lld steps; peak %.1f GFLOP/s (%s)\n",
               static_cast<long long>(a.warmup), static_cast<long long>(a.steps), static_cast<long long>(a.window),
               peak.gflops, peak.source.c_str());
  {  // src/cli/main.cpp chose it (or the user did)
    const char* wait = std::getenv("BRAID_OPENMP_WAIT");
    const char* pol = std::getenv("OMP_WAIT_POLICY");
    const char* spin = std::getenv("GOMP_SPINCOUNT");
    std::string w = wait ? wait : pol ? std::string("OMP_WAIT_POLICY=") + pol + " (set by the user)"
                                : spin ? std::string("GOMP_SPINCOUNT=") + spin + " (set by the user)" : "libgomp's default";
    std::fprintf(out, "  OpenMP wait: %s\n", w.c_str());
  }
  // Load every configuration first, so that a mistake in the last one fails before any time is spent.
  struct Job {
    std::string run, sweep;
    io::RunConfig cfg;
  };
  std::vector<Job> jobs;
  for (const auto& path : a.paths)
    for (const auto& pt : points) {
      auto sets = a.sets;
      sets.insert(sets.end(), pt.begin(), pt.end());
      std::string label;
      for (const auto& s : pt) label += (label.empty() ? "" : " ") + s;
      jobs.push_back(Job{path, label, load_run(path, sets)});
    }
  std::vector<Row> rows;
  exec::BenchOptions o;
  o.steps = a.steps;
  o.warmup = a.warmup;
  for (const auto& j : jobs) {
    const CpuSample before = CpuSample::now();
    exec::BenchResult r = exec::bench(j.cfg, o);
    const double other = other_cores(before, CpuSample::now());
    rows.push_back(summarise(j.run, j.sweep, std::move(r), a.window, peak));
    auto& w = rows.back();
    w.other_cores = other;
    std::fprintf(out, "  %s%s%s: %.1f samples/s%s\n", j.run.c_str(), j.sweep.empty() ? "" : " ", j.sweep.c_str(),
                 w.sps_median, other > 0.25 ? fmt(" (other processes used %.1f cores meanwhile: figures disturbed)", other).c_str() : "");
    if (!w.r.plan.empty())
      std::fprintf(out, "    plan: %s; measured step %.2f ms (median)\n", w.r.plan.c_str(), w.step_ms_median);
    if (!w.r.device.empty())
      std::fprintf(out, "    on %s; MFU against its dense bf16 peak of %.1f TFLOP/s\n", w.r.device.c_str(),
                   w.r.device_peak_flops / 1e12);
    std::fflush(out);
  }

  std::vector<std::vector<std::string>> cells;
  cells.push_back({"run", "batch", "samples/s", "min-max", "IQR", "tokens/s", "step ms", "GFLOP/s", "MFU", "peak RSS", "arena"});
  for (const auto& w : rows) {
    const auto& r = w.r;
    std::string name = w.run + (w.sweep.empty() ? "" : " " + w.sweep);
    cells.push_back({name, std::to_string(r.batch), fmt("%.1f", w.sps_median),
                     fmt("%.1f", w.sps_min) + "-" + fmt("%.1f", w.sps_max), fmt("%.1f", w.sps_p75 - w.sps_p25),
                     r.tokens_per_sample ? fmt("%.0f", w.sps_median * static_cast<double>(r.tokens_per_sample)) : "-",
                     fmt("%.2f", w.step_ms_median), fmt("%.2f", w.flops_per_s / 1e9),
                     w.mfu > 0 ? fmt("%.1f%%", 100 * w.mfu) : "-", mib(static_cast<double>(w.peak_rss_bytes)),
                     mib(static_cast<double>(r.arena_bytes))});
  }
  std::vector<size_t> width(cells[0].size(), 0);
  for (const auto& c : cells)
    for (size_t i = 0; i < c.size(); ++i) width[i] = std::max(width[i], c[i].size());
  for (const auto& c : cells) {
    std::string line;
    for (size_t i = 0; i < c.size(); ++i) {
      std::string pad(width[i] - c[i].size(), ' ');
      line += (i ? "  " : "") + (i == 0 ? c[i] + pad : pad + c[i]);
    }
    std::fprintf(out, "%s\n", line.c_str());
  }
  std::fprintf(out, "samples/s: median over windows of %lld steps; tokens/s = samples/s x sequence length; "
               "GFLOP/s = training FLOPs per sample x median samples/s; peak RSS of this process so far\n",
               static_cast<long long>(a.window));
  if (!a.csv.empty()) {
    std::string text = kCsvHeader;
    for (const auto& w : rows) text += csv_row(w, a, peak);
    write_file(a.csv, text);
    std::fprintf(out, "CSV written to %s\n", a.csv.c_str());
  }
  if (!a.json.empty()) {
    write_file(a.json, json_doc(rows, a, peak));
    std::fprintf(out, "JSON written to %s\n", a.json.c_str());
  }
  return 0;
}

int time_layers(const TimeArgs& a, FILE* out) {
  check_counts(a.steps, a.warmup);
  io::RunConfig cfg = load_run(a.path, a.sets);
  exec::BenchOptions o;
  o.steps = a.steps;
  o.warmup = a.warmup;
  o.per_node = true;
  exec::BenchResult r = exec::bench(cfg, o);
  const double n = static_cast<double>(r.step_s.size());
  double step = 0;
  for (double s : r.step_s) step += s;
  const double step_ms = 1e3 * step / n;
  std::fprintf(out, "braid time: %s (%s), batch %lld (micro-batch %lld), %lld threads; mean over %lld steps after %lld warmup\n",
               r.model.c_str(), a.path.c_str(), static_cast<long long>(r.batch), static_cast<long long>(r.micro_batch),
               static_cast<long long>(r.threads), static_cast<long long>(a.steps), static_cast<long long>(a.warmup));
  size_t wl = 5, wo = 2;
  for (const auto& l : r.layers) {
    wl = std::max(wl, l.layer.size());
    wo = std::max(wo, l.op.size() + 1);
  }
  wl = std::max<size_t>(wl, 17);
  auto pct = [&](double ms) { return fmt("%.1f%%", step_ms > 0 ? 100 * ms / step_ms : 0); };
  std::fprintf(out, "%-*s  %-*s  %11s  %11s  %10s  %6s\n", static_cast<int>(wl), "layer", static_cast<int>(wo), "op",
               "forward ms", "backward ms", "total ms", "share");
  double fwd = 0, bwd = 0;
  std::string fused_note, backward_note;
  for (const auto& l : r.layers) {
    if (!l.fused_into.empty() && fused_note.empty())
      fused_note = "* forward fused into the layer before it (" + l.fused_into +
                   " here): that layer's GEMM applies the activation as its epilogue, and the time is counted there\n";
    if (!l.backward_fused_into.empty() && backward_note.empty())
      backward_note = "  backward fused into the layer after it (" + l.backward_fused_into +
                      " here): its input-gradient GEMM applies the activation's derivative as its epilogue\n";
    double f = 1e3 * l.forward_s / n, b = 1e3 * l.backward_s / n;
    fwd += f;
    bwd += b;
    std::fprintf(out, "%-*s  %-*s  %11.3f  %11.3f  %10.3f  %6s\n", static_cast<int>(wl), l.layer.c_str(),
                 static_cast<int>(wo), (l.op + (l.fused_into.empty() && l.backward_fused_into.empty() ? "" : "*")).c_str(), f, b, f + b,
                 pct(f + b).c_str());
  }
  auto line = [&](const char* name, double ms) {
    std::fprintf(out, "%-*s  %-*s  %11s  %11s  %10.3f  %6s\n", static_cast<int>(wl), name, static_cast<int>(wo), "", "",
                 "", ms, pct(ms).c_str());
  };
  std::fprintf(out, "%-*s  %-*s  %11.3f  %11.3f  %10.3f  %6s\n", static_cast<int>(wl), "layers", static_cast<int>(wo), "",
               fwd, bwd, fwd + bwd, pct(fwd + bwd).c_str());
  const double data = 1e3 * r.data_s / n, acc = 1e3 * r.accumulate_s / n, opt = 1e3 * r.optimizer_s / n;
  line("data", data);
  line("grad accumulate", acc);
  line("clip + optimizer", opt);
  line("other", std::max(0.0, step_ms - fwd - bwd - data - acc - opt));
  line("step", step_ms);
  if (!fused_note.empty()) std::fputs(fused_note.c_str(), out);
  if (!backward_note.empty()) std::fputs((fused_note.empty() ? "*" + backward_note.substr(1) : backward_note).c_str(), out);
  if (!r.device.empty())
    std::fprintf(out, "on %s: every node waited for (launch and wait in its time); upload, accumulation and "
                 "optimizer are in \"other\"\n", r.device.c_str());
  // By op kind, the most first: where the time goes, whatever the layer.
  size_t wop = 2;
  for (const auto& [op, s] : r.ops) wop = std::max(wop, op.size());
  std::fprintf(out, "\nby op (forward and backward ops apart), the most first:\n");
  int shown = 0;
  double rest = 0;
  for (const auto& [op, s] : r.ops) {
    const double ms = 1e3 * s / n;
    if (shown++ < 15) std::fprintf(out, "  %-*s  %10.3f ms  %6s\n", static_cast<int>(wop), op.c_str(), ms, pct(ms).c_str());
    else rest += ms;
  }
  if (rest > 0) std::fprintf(out, "  %-*s  %10.3f ms  %6s\n", static_cast<int>(wop), "(the rest)", rest, pct(rest).c_str());
  return 0;
}

}  // namespace braid::cli
