// `braid calibrate --devices cpu:N`: runs exec::calibrate and caches the profile (exec/calibrate.h).
#include <chrono>

#include "cli/commands.h"
#include "core/error.h"
#include "exec/calibrate.h"
#include "planner/plan.h"

namespace braid::cli {

int calibrate(const CalibrateArgs& a, FILE* out) {
  const SourceLoc cli{"<command line>", 0, 0};
  planner::DeviceSpec spec;
  std::string err;
  if (!planner::parse_devices(a.devices, &spec, &err)) throw UserError(cli, "--devices '" + a.devices + "': " + err);
  if (spec.kind != "cpu") throw UserError(cli, "braid calibrate measures cpu:N devices, not " + a.devices);
  if (!(a.budget_s > 0)) throw UserError(cli, "--budget must be a positive number of seconds");
  auto t0 = std::chrono::steady_clock::now();
  exec::CalibrateOptions o;
  o.devices = spec.count;
  o.budget_s = a.budget_s;
  o.log = out;
  planner::Profile p = exec::calibrate(o);
  std::string path = exec::save_profile(p);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(out, "braid calibrate: %zu op kinds measured in %.1f s; profile written to %s\n", p.efficiency.size(), s,
               path.c_str());
  if (a.print) std::fputs(planner::to_yaml(p).c_str(), out);
  return 0;
}

}  // namespace braid::cli
