// ClosedLoop (closed_loop.h): predicted vs measured step time and per-position busy time; fitting the profile's
// feedback from those records.
#include "exec/closed_loop.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "core/stats.h"
#include "exec/calibrate.h"
#include "io/expr.h"
#include "io/paths.h"
#include "io/yaml_source.h"

namespace braid::exec {

void ClosedLoop::record(int64_t i, double seconds, const Engine& pr) {
  if (done_) return;
  if (i == kFirst - 1 || (i == 0 && kFirst == 0)) busy0_ = pr.busy_seconds();
  if (i >= kFirst && i < kEnd) {
    if (busy0_.empty()) busy0_.assign(static_cast<size_t>(pr.devices()), 0.0);
    times_.push_back(seconds);
  }
}

std::optional<io::MetricsRecord> ClosedLoop::report(int64_t i, int64_t steps, const RunPlan& run, const Engine& pr,
                                                    FILE* out, const std::string& metrics_path) {
  const planner::StepPrediction& p = run.prediction;
  if (done_ || times_.empty() || (i != kEnd - 1 && i != steps - 1)) return std::nullopt;
  done_ = true;
  const double measured = median(times_);
  const double predicted = p.step_time_s;
  const double err = predicted > 0 ? measured / predicted - 1 : 0;
  io::MetricsRecord rec;
  rec.kind = "prediction";
  rec.extra.emplace_back("predicted_step_s", predicted);
  rec.extra.emplace_back("measured_step_s", measured);
  rec.extra.emplace_back("predicted_tail_s", p.tail_s);
  rec.extra.emplace_back("devices", static_cast<double>(pr.devices()));
  const int cores = machine_cores();
  rec.extra.emplace_back("host_cores", static_cast<double>(cores));
  rec.extra.emplace_back("busy_scale", run.busy_scale);
  rec.extra.emplace_back("tail_scale", run.tail_scale);
  std::fprintf(out, "braid: step time predicted %.2f ms, measured %.2f ms (median of steps %lld-%lld): %+.1f%%\n",
               predicted * 1e3, measured * 1e3, static_cast<long long>(kFirst + 1),
               static_cast<long long>(kFirst + static_cast<int64_t>(times_.size())), 100 * err);
  // Per pipeline position: forward + backward of every micro-batch of the position's stages.
  const auto& progs = pr.programs();
  const int positions = std::max(1, pr.schedule().devices);
  std::vector<double> busy = pr.busy_seconds();
  std::string line;
  for (int pos = 0; pos < positions; ++pos) {
    double pred = 0;
    int dev = -1;
    for (size_t s = 0; s < progs.size() && s < p.stages.size(); ++s)
      if (static_cast<int>(s) % positions == pos) {
        pred += p.stages[s].time() * static_cast<double>(pr.micro_batches());
        if (dev < 0) dev = progs[s].devices.front();
      }
    if (dev < 0 || !pr.is_local(dev)) continue;  // another process's position: measured there, not here
    double meas = (busy[static_cast<size_t>(dev)] - busy0_[static_cast<size_t>(dev)]) / static_cast<double>(times_.size());
    rec.extra.emplace_back("predicted_busy_s_" + std::to_string(pos), pred);
    rec.extra.emplace_back("measured_busy_s_" + std::to_string(pos), meas);
    char buf[96];
    std::snprintf(buf, sizeof buf, "%s%d: %.2f / %.2f ms", line.empty() ? "" : ", ", pos, pred * 1e3, meas * 1e3);
    line += buf;
  }
  if (!line.empty())
    std::fprintf(out, "braid: forward+backward per step by pipeline position, predicted / measured: %s%s\n", line.c_str(),
                 pr.devices() > cores ? " (devices share cores: predicted with all of them computing, measured as they ran)"
                                      : "");
  if (std::fabs(err) > kWarnAbove) {
    std::string feed = metrics_path.empty() ? std::string()
                                            : ", or feed this run back: `braid calibrate --devices cpu:" +
                                                  std::to_string(pr.devices()) + " --from-run " + metrics_path + "`";
    std::fprintf(out, "braid: warning: the measured step time differs from the prediction by %+.0f%% (more than %.0f%%); "
                 "run `braid calibrate --devices cpu:%d` on an idle machine%s; see docs/planner.md\n",
                 100 * err, 100 * kWarnAbove, pr.devices(), feed.c_str());
  }
  return rec;
}

planner::Profile::Feedback fit_feedback(const std::vector<std::string>& metrics_files, int devices,
                                        const planner::Profile::Feedback& current, int* other_devices,
                                        int* tail_records) {
  std::vector<double> busy, tail;
  int other = 0, records = 0;
  for (const std::string& path : metrics_files) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec))
      throw UserError(SourceLoc{path, 0, 0}, "cannot read the metrics file: no such file", "give the log.metrics file of a run");
    // read_file: a regular file only (a FIFO or a device named here would block or never end), any size.
    std::istringstream in(io::read_file(path));
    std::string line;
    int lineno = 0;
    while (std::getline(in, line)) {
      ++lineno;
      const SourceLoc at{path, lineno, 1};
      if (line.find("\"predicted_step_s\"") == std::string::npos) continue;  // not a closed-loop record
      Diagnostics d;
      io::YNode rec = io::parse_yaml(line, path, d);
      if (!d.empty() || !rec.is_map())
        throw UserError(at, "not a JSON object: " + (d.empty() ? rec.kind_name() : d.all()[0].message),
                        "the file must be braid's metrics file (log.metrics), one JSON object per line");
      std::map<std::string, double> f;
      for (const auto& [k, v] : rec.map) {
        if (!v.is_scalar() || k.scalar == "kind") continue;  // null: a figure that was not finite
        if (auto x = io::eval_float(v, {}, k.scalar, d)) f[k.scalar] = *x;
      }
      if (!d.empty()) throw UserError(at, d.all()[0].message, "the file must be braid's metrics file (log.metrics)");
      for (const char* k : {"predicted_step_s", "measured_step_s"})
        if (!f.count(k) || !(f[k] > 0))
          throw UserError(at, std::string("a closed-loop record needs a positive '") + k + "'");
      if (!f.count("devices") || !f.count("predicted_tail_s"))
        throw UserError(at, "this closed-loop record has no 'devices' or 'predicted_tail_s' (written by an older braid)",
                        "train again with this braid to measure the run");
      if (static_cast<int>(f["devices"]) != devices) {
        ++other;
        continue;
      }
      double pb = 0, mb = 0;
      for (int k = 0; f.count("predicted_busy_s_" + std::to_string(k)); ++k) {
        pb += f["predicted_busy_s_" + std::to_string(k)];
        mb += f["measured_busy_s_" + std::to_string(k)];
      }
      if (!(pb > 0) || !(mb > 0)) throw UserError(at, "a closed-loop record without busy times");
      const double b0 = f.count("busy_scale") ? f["busy_scale"] : 1, t0 = f.count("tail_scale") ? f["tail_scale"] : 1;
      const double ratio = mb / pb;
      const double step = f["predicted_step_s"], measured = f["measured_step_s"], t = f["predicted_tail_s"];
      ++records;
      if (f.count("host_cores") && f["devices"] > f["host_cores"]) {
        // Devices sharing cores: the prediction's busy times are at the speed of all devices computing at once,
        // a device's measured ones at the speed it ran (alone on its core for stretches of a pipeline), so their
        // ratio says nothing of the model. The step's ratio scales both, keeping the plans' order.
        busy.push_back(b0 * measured / step);
        tail.push_back(t0 * measured / step);
        continue;
      }
      busy.push_back(b0 * ratio);
      if (t >= 0.05 * step) {
        const double o = (measured - ratio * (step - t)) / t;
        if (o >= 0.1 && o <= 10) tail.push_back(t0 * o);
      }
    }
  }
  if (other_devices) *other_devices = other;
  if (tail_records) *tail_records = static_cast<int>(tail.size());
  if (busy.empty()) {
    std::string files;
    for (const std::string& p : metrics_files) files += (files.empty() ? "" : ", ") + p;
    throw UserError(SourceLoc{"<command line>", 0, 0},
                    "no closed-loop record of a cpu:" + std::to_string(devices) + " run in " + files +
                        (other ? " (" + std::to_string(other) + " of other device counts)" : ""),
                    "the trainer writes one per run under a plan (parallel.plan: auto or a plan file) that trains at "
                    "least 3 steps with log.metrics set");
  }
  planner::Profile::Feedback fb;
  fb.devices = devices;
  fb.records = records;
  fb.busy_scale = median(busy);
  fb.tail_scale = tail.empty() ? current.tail_scale : median(tail);
  return fb;
}

}  // namespace braid::exec
