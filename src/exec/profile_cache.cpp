// The machine's description (cpu model, cores, a core's peak) and the calibration profile's cache: its path,
// loading, saving, and the cost model for cpu:N made from it (calibrate.h).
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/parallel.h"
#include "exec/calibrate.h"
#include "io/paths.h"
#include "planner/cluster.h"

namespace braid::exec {

namespace fs = std::filesystem;

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      auto c = line.find(':');
      return c == std::string::npos ? "cpu" : line.substr(c + 2);
    }
  return "cpu";
}

int machine_cores() { return allowed_cpus(); }

double core_peak_flops() {
  std::ifstream f("/proc/cpuinfo");
  std::string line, flags;
  double ghz = 0;
  while (std::getline(f, line)) {
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    if (key == "cpu MHz" && ghz == 0) ghz = std::atof(line.c_str() + colon + 1) / 1000.0;
    if (key == "flags" && flags.empty()) flags = " " + line.substr(colon + 1) + " ";
  }
  auto has = [&](const char* fl) { return flags.find(" " + std::string(fl) + " ") != std::string::npos; };
  int per_cycle = has("fma") && has("avx2") ? 32 : has("avx") ? 16 : 8;
  return ghz > 0 ? ghz * 1e9 * per_cycle : 64e9;
}

std::string profile_path() {
  std::string machine = cpu_model() + "-" + std::to_string(machine_cores()) + "c";
  for (char& c : machine)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  fs::path dir = xdg && *xdg ? fs::path(xdg) / "braid" : fs::path(home ? home : ".") / ".cache" / "braid";
  return (dir / ("profile-" + machine + "-" + kProfileVersion + ".yaml")).string();
}

std::optional<planner::Profile> load_profile() {
  std::string path = profile_path();
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  const std::string text = io::read_file(path, 16 << 20);  // a regular file of at most 16 MiB, or a UserError
  Diagnostics d;
  planner::Profile p = planner::parse_profile(text, path, d);
  if (p.devices < 1) d.error(SourceLoc{path, 1, 1}, "the profile needs 'devices' (the N of cpu:N it measured)");
  if (!d.empty())
    throw UserError(d.all()[0].loc, d.all()[0].message, "run `braid calibrate --devices cpu:N` again, or delete " + path);
  return p;
}

std::string save_profile(const planner::Profile& p) {
  std::string path = profile_path();
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary);
    if (!f || !(f << planner::to_yaml(p)) || !f.flush())
      throw UserError(SourceLoc{path, 0, 0}, "cannot write the calibration profile", "set XDG_CACHE_HOME to a writable folder");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw UserError(SourceLoc{path, 0, 0}, "cannot write the calibration profile", "set XDG_CACHE_HOME to a writable folder");
  return path;
}

CpuModel cpu_cost_model(int n) {
  CpuModel m;
  const int cores = machine_cores();
  const std::string name = "cpu:" + std::to_string(n);
  if (auto prof = load_profile()) {
    planner::Profile p = *prof;
    // Per-device figures scale with the device's share of the machine: measured for p.devices, used for n.
    double k = static_cast<double>(p.devices) / n;
    p.cpu.peak_flops_f32 *= k;
    p.cpu.memory_bandwidth *= k;
    p.cache_bandwidth *= k;
    p.cpu.memory_bytes *= k;
    p.cpu.cores = cores;
    if (p.devices == n) p.cpu.busy_speed = p.busy_speed;  // measured for these N devices only
    if (p.devices != n)  // sub-group collectives were measured beside the other groups of those N devices
      std::erase_if(p.collectives, [](const auto& kv) { return kv.first.find('@') != std::string::npos; });
    m.model = planner::calibrated_cost_model(planner::cluster_preset(name, p.cpu), p);
    m.description = "calibrated (" + profile_path() + ", measured on cpu:" + std::to_string(p.devices);
    if (const planner::Profile::Feedback* fb = p.feedback_for(n)) {
      m.model = planner::fed_back_cost_model(std::move(m.model), fb->busy_scale, fb->tail_scale);
      char buf[160];
      std::snprintf(buf, sizeof buf, "; %d run record(s) fed back: busy x%.3g, tail x%.3g", fb->records, fb->busy_scale,
                    fb->tail_scale);
      m.description += buf;
    }
    m.description += ")";
    return m;
  }
  planner::CpuFigures f = planner::fallback_cpu_figures(n, cores);
  f.cores = cores;
  // The memory is this machine's, shared as calibration shares it (80% of it over the devices): a plan file is
  // refused when a stage would not fit it (run_plan), which the fallback's nominal 4 GiB must not decide.
  f.memory_bytes = host_memory_share(n);
  m.model = planner::analytic_cost_model(planner::cluster_preset(name, f));
  m.description = "analytic (no calibration profile at " + profile_path() + ": run `braid calibrate --devices " + name + "`)";
  return m;
}

}  // namespace braid::exec
