// `braid calibrate --devices cpu:N`: runs exec::calibrate and caches the profile (exec/calibrate.h); with
// --from-run, fits the cached profile's feedback for cpu:N to runs' closed-loop records (exec/closed_loop.h).
#include <chrono>

#include "cli/commands.h"
#include "core/error.h"
#include "exec/calibrate.h"
#include "exec/closed_loop.h"
#include "planner/plan.h"

namespace braid::cli {

int calibrate(const CalibrateArgs& a, FILE* out) {
  const SourceLoc cli{"<command line>", 0, 0};
  planner::DeviceSpec spec;
  std::string err;
  if (!planner::parse_devices(a.devices, &spec, &err)) throw UserError(cli, "--devices '" + a.devices + "': " + err);
  if (spec.kind != "cpu") throw UserError(cli, "braid calibrate measures cpu:N devices, not " + a.devices);
  if (!(a.budget_s > 0)) throw UserError(cli, "--budget must be a positive number of seconds");
  if (!a.from_run.empty()) {
    std::optional<planner::Profile> prof = exec::load_profile();
    if (!prof)
      throw UserError(cli, "no calibration profile to feed the runs into (" + exec::profile_path() + ")",
                      "run `braid calibrate --devices " + a.devices + "` first, then train, then feed the run back");
    planner::Profile p = *prof;
    const planner::Profile::Feedback* old = p.feedback_for(spec.count);
    const planner::Profile::Feedback was = old ? *old : planner::Profile::Feedback{};
    int other = 0, tails = 0;
    planner::Profile::Feedback fb = exec::fit_feedback(a.from_run, spec.count, was, &other, &tails);
    std::erase_if(p.feedback, [&](const planner::Profile::Feedback& f) { return f.devices == spec.count; });
    p.feedback.push_back(fb);
    std::sort(p.feedback.begin(), p.feedback.end(), [](const auto& x, const auto& y) { return x.devices < y.devices; });
    std::string path = exec::save_profile(p);
    std::fprintf(out, "braid calibrate: %d closed-loop record(s) of cpu:%d runs fitted: busy x%.3f (was x%.3f), "
                 "tail x%.3f (was x%.3f%s)%s; profile written to %s\n",
                 fb.records, spec.count, fb.busy_scale, was.busy_scale, fb.tail_scale, was.tail_scale,
                 tails ? "" : "; kept: no record's tail was long enough to measure",
                 other ? (", " + std::to_string(other) + " record(s) of other device counts passed over").c_str() : "",
                 path.c_str());
    if (a.print) std::fputs(planner::to_yaml(p).c_str(), out);
    return 0;
  }
  auto t0 = std::chrono::steady_clock::now();
  exec::CalibrateOptions o;
  o.devices = spec.count;
  o.budget_s = a.budget_s;
  o.log = out;
  planner::Profile p = exec::calibrate(o);
  std::string path = exec::save_profile(p);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(out, "braid calibrate: %zu op kinds measured; %.1f s in all (the --budget of %.0f s bounds the op "
               "measurements only); profile written to %s\n", p.efficiency.size(), s, a.budget_s, path.c_str());
  if (a.print) std::fputs(planner::to_yaml(p).c_str(), out);
  return 0;
}

}  // namespace braid::cli
