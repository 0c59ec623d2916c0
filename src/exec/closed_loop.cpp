// ClosedLoop (closed_loop.h): predicted vs measured step time and per-position busy time.
#include "exec/closed_loop.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace braid::exec {

void ClosedLoop::record(int64_t i, double seconds, const PlanRunner& pr) {
  if (done_) return;
  if (i == kFirst - 1 || (i == 0 && kFirst == 0)) busy0_ = pr.busy_seconds();
  if (i >= kFirst && i < kEnd) {
    if (busy0_.empty()) busy0_.assign(static_cast<size_t>(pr.devices()), 0.0);
    times_.push_back(seconds);
  }
}

std::optional<io::MetricsRecord> ClosedLoop::report(int64_t i, int64_t steps, const planner::StepPrediction& p,
                                                    const PlanRunner& pr, FILE* out) {
  if (done_ || times_.empty() || (i != kEnd - 1 && i != steps - 1)) return std::nullopt;
  done_ = true;
  std::vector<double> t = times_;
  std::sort(t.begin(), t.end());
  const size_t k = t.size() / 2;
  const double measured = t.size() % 2 ? t[k] : (t[k - 1] + t[k]) / 2;
  const double predicted = p.step_time_s;
  const double err = predicted > 0 ? measured / predicted - 1 : 0;
  io::MetricsRecord rec;
  rec.extra.emplace_back("predicted_step_s", predicted);
  rec.extra.emplace_back("measured_step_s", measured);
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
    if (dev < 0) continue;
    double meas = (busy[static_cast<size_t>(dev)] - busy0_[static_cast<size_t>(dev)]) / static_cast<double>(times_.size());
    rec.extra.emplace_back("predicted_busy_s_" + std::to_string(pos), pred);
    rec.extra.emplace_back("measured_busy_s_" + std::to_string(pos), meas);
    char buf[96];
    std::snprintf(buf, sizeof buf, "%s%d: %.2f / %.2f ms", line.empty() ? "" : ", ", pos, pred * 1e3, meas * 1e3);
    line += buf;
  }
  if (!line.empty())
    std::fprintf(out, "braid: forward+backward per step by pipeline position, predicted / measured: %s\n", line.c_str());
  if (std::fabs(err) > kWarnAbove)
    std::fprintf(out, "braid: warning: the measured step time differs from the prediction by %+.0f%% (more than %.0f%%); "
                 "run `braid calibrate --devices cpu:%d` on an idle machine, or see docs/planner.md\n",
                 100 * err, 100 * kWarnAbove, pr.devices());
  return rec;
}

}  // namespace braid::exec
