// braid calibrate (exec/calibrate.h): a short calibration on cpu:2 gives a profile with every shipped op family's
// efficiency, backward ratios and the four collectives' alpha/beta; it round-trips through its YAML form, is
// cached where profile_path() says (XDG_CACHE_HOME), and cpu_cost_model then uses it (rescaled for another N).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "exec/calibrate.h"
#include "exec/calibrate_parts.h"
#include "planner/cost_model.h"
#include "temp_dir.h"

using namespace braid;

TEST(Calibrate, ShortRunGivesAUsableProfile) {
  auto dir = braid::testing::process_temp_dir() / "calibrate";
  std::filesystem::remove_all(dir);
  setenv("XDG_CACHE_HOME", dir.c_str(), 1);
  EXPECT_EQ(exec::cpu_cost_model(2).model->name(), "analytic");
  exec::CalibrateOptions o;
  o.devices = 2;
  o.budget_s = 2;
  o.quiet_tries = 1;  // the suite runs tests side by side: no waiting for a quiet machine here
  planner::Profile p = exec::calibrate(o);
  EXPECT_EQ(p.devices, 2);
  for (const char* op : {"linear", "attention", "layer_norm", "embedding", "cross_entropy"}) {
    ASSERT_TRUE(p.efficiency.count(op)) << op;
    for (const auto& [cls, e] : p.efficiency.at(op)) EXPECT_GT(e, 0) << op << " " << cls;
    EXPECT_GT(p.backward_ratio.at(op), 0) << op;
  }
  for (const char* c : {"all_reduce", "all_gather", "reduce_scatter", "send_recv"}) {
    ASSERT_TRUE(p.collectives.count(c)) << c;
    EXPECT_GE(p.collectives.at(c).first, 0);
    // Every byte costs at least its read and write at the cache bandwidth, however loaded the machine.
    EXPECT_GE(p.collectives.at(c).second, 2 / p.cache_bandwidth * (1 - 1e-12)) << c;
  }
  // The data-parallel gradient all-reduce, timed cold, has the same floor.
  ASSERT_TRUE(p.collectives.count("grad_all_reduce"));
  EXPECT_GE(p.collectives.at("grad_all_reduce").second, 2 / p.cache_bandwidth * (1 - 1e-12));
  EXPECT_GT(p.cpu.peak_flops_f32, 0);
  EXPECT_GT(p.cpu.memory_bandwidth, 0);
  for (int states : {0, 1, 2}) {
    EXPECT_GT(p.optimizer_s_per_byte.at(states), 0) << states;
    EXPECT_GT(p.optimizer_warm_s_per_byte.at(states), 0) << states;
  }
  EXPECT_GT(p.cache_bytes, 0);
  // Copies within a worker's share of the last-level cache are not slower than copies through memory (the
  // calibration keeps the larger: on a VM that reports its host's cache the two measure the same thing).
  EXPECT_GE(p.cache_bandwidth, p.cpu.memory_bandwidth);
  // Packing weights from memory: both bytes (read and written) at the measured bandwidth.
  EXPECT_DOUBLE_EQ(p.weight_s_per_byte, 2 / p.cpu.memory_bandwidth);
  // Turns on a core: measured only where two devices share one (cpu:2 on this machine's cores or more: 0).
  if (p.devices <= exec::machine_cores()) {
    EXPECT_EQ(p.switch_s_per_byte, 0);
  }
  EXPECT_GE(p.switch_s_per_byte, 0);
  EXPECT_GT(p.clip_s_per_byte, 0);
  EXPECT_GT(p.accumulate_s_per_byte, 0);
  ASSERT_EQ(p.busy_speed.size(), 2u);
  EXPECT_GE(p.busy_speed[0], 1);  // a device alone is never slower than with all busy
  EXPECT_EQ(p.busy_speed[1], 1);
  EXPECT_GE(p.runner.step_overhead, 0);
  EXPECT_GE(p.runner.micro_batch_overhead, 0);
  EXPECT_GE(p.runner.pipeline_micro_batch_overhead, 0);
  // Residuals of measured against predicted steps: each clamped at 0, and 0 is a legitimate answer where the
  // op figures came out slow (under ctest -j2 beside other tests, or with two busy loops beside it, all three
  // were 0 in three of six runs); finite and below a step of the tiny workload.
  for (double x : {p.runner.step_overhead, p.runner.micro_batch_overhead, p.runner.pipeline_micro_batch_overhead}) {
    EXPECT_TRUE(std::isfinite(x));
    EXPECT_LT(x, 0.1);
  }
  Diagnostics d;
  planner::Profile back = planner::parse_profile(planner::to_yaml(p), "p.yaml", d);
  ASSERT_TRUE(d.empty()) << d.all()[0].format();
  EXPECT_EQ(planner::to_yaml(back), planner::to_yaml(p));
  std::string path = exec::save_profile(p);
  EXPECT_EQ(path, exec::profile_path());
  EXPECT_EQ(path.rfind(dir.string(), 0), 0u) << path;
  auto m2 = exec::cpu_cost_model(2), m4 = exec::cpu_cost_model(4);
  EXPECT_EQ(m2.model->name(), "calibrated");
  EXPECT_DOUBLE_EQ(m4.model->cluster().device.peak(DType::f32) * 2, m2.model->cluster().device.peak(DType::f32));
  std::filesystem::remove_all(dir);
  unsetenv("XDG_CACHE_HOME");
}

// Devices taking turns on a core: nothing to measure while each has a core; with two devices a core, the
// workers of a core pass their token to the end (no deadlock) and the figure is finite and not negative.
// The collectives' fit: exact on points of a line; where noise makes the large messages look as fast as the
// small ones (a loaded machine: CI saw all_gather fitted with beta 0 under ctest -j4 on 2 cores), beta is the
// floor and alpha the intercept that fits best with it, never a free byte or a negative latency.
TEST(Calibrate, CollectiveFitIsExactOnALineAndNeverMakesBytesFree) {
  const double alpha = 5e-6, beta = 1e-10, steps = 2;
  std::vector<std::pair<double, double>> line;
  for (double x : {4e3, 64e3, 1e6, 8e6}) line.emplace_back(x, alpha * steps + beta * x);
  auto [a, b] = exec::calib::fit_alpha_beta(line, steps, 0);
  EXPECT_NEAR(a, alpha, 1e-9 * alpha);
  EXPECT_NEAR(b, beta, 1e-9 * beta);
  EXPECT_EQ(exec::calib::fit_alpha_beta(line, steps, 1e-11), std::make_pair(a, b));  // a floor below: no effect
  // Time-sliced: the small messages waited for the scheduler, the large ones did not.
  const std::vector<std::pair<double, double>> loaded{{4e3, 2.0e-3}, {64e3, 1.9e-3}, {1e6, 1.6e-3}, {8e6, 1.5e-3}};
  EXPECT_EQ(exec::calib::fit_alpha_beta(loaded, steps, 0).second, 0);  // what the fit alone gives
  const double floor = 2 / 40e9;
  auto [la, lb] = exec::calib::fit_alpha_beta(loaded, steps, floor);
  EXPECT_EQ(lb, floor);
  EXPECT_GT(la, 0);
  EXPECT_LT(la * steps, 2.0e-3);
  // A floor above every point's time per byte: the intercept clamps at zero, beta stays the floor.
  auto [za, zb] = exec::calib::fit_alpha_beta(loaded, steps, 1e-6);
  EXPECT_EQ(za, 0);
  EXPECT_EQ(zb, 1e-6);
}

TEST(Calibrate, TurnsOnACoreAreMeasuredOnlyWhereDevicesShareOne) {
  const int cores = exec::machine_cores();
  double bytes = -1;
  EXPECT_EQ(exec::measure_turns(cores, &bytes), 0);
  const double s = exec::measure_turns(2 * cores, &bytes);
  EXPECT_TRUE(std::isfinite(s));
  EXPECT_GE(s, 0);
  EXPECT_NEAR(bytes, 3.0 * 4 * (784 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10), 1);  // the MLP 784-512-512-10
  // One device more than cores: one core holds two, the others one each, which pass the token to themselves.
  EXPECT_GE(exec::measure_turns(cores + 1), 0);
}

TEST(Calibrate, MalformedProfileIsALocatedError) {
  auto dir = braid::testing::process_temp_dir() / "calibrate_bad";
  std::filesystem::remove_all(dir);
  setenv("XDG_CACHE_HOME", dir.c_str(), 1);
  std::filesystem::create_directories(std::filesystem::path(exec::profile_path()).parent_path());
  {
    std::ofstream f(exec::profile_path());
    f << "devices: 2\ncpu: {peak_flops_f32: -1}\n";
  }
  try {
    exec::load_profile();
    ADD_FAILURE() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(e.format().find(exec::profile_path() + ":2:"), std::string::npos) << e.format();
  }
  std::filesystem::remove_all(dir);
  unsetenv("XDG_CACHE_HOME");
}

TEST(Calibrate, EfficiencyInterpolatesBetweenFlopDecades) {
  EXPECT_EQ(planner::shape_class(5e7), "1e7");
  EXPECT_EQ(planner::shape_class(1e7), "1e7");
  EXPECT_EQ(planner::shape_class(0.5), "1e0");
  const std::map<std::string, double> m{{"1e6", 0.2}, {"1e8", 0.6}};
  EXPECT_DOUBLE_EQ(planner::class_efficiency(m, std::pow(10.0, 6.5), 0.5), 0.2);   // a decade's centre
  EXPECT_DOUBLE_EQ(planner::class_efficiency(m, std::pow(10.0, 7.5), 0.5), 0.4);   // halfway between centres
  EXPECT_DOUBLE_EQ(planner::class_efficiency(m, 1e3, 0.5), 0.2);                   // below: the nearest
  EXPECT_DOUBLE_EQ(planner::class_efficiency(m, 1e11, 0.5), 0.6);                  // above: the nearest
  EXPECT_DOUBLE_EQ(planner::class_efficiency({}, 1e7, 0.5), 0.5);                  // none measured
  // Profiles written before decades (small / medium / large) still read; an unknown class is a located error.
  Diagnostics d;
  planner::Profile old = planner::parse_profile("efficiency: {linear: {medium: 0.3}}\n", "old.yaml", d);
  EXPECT_TRUE(d.empty());
  EXPECT_DOUBLE_EQ(planner::class_efficiency(old.efficiency.at("linear"), 1e9, 0.5), 0.3);
  Diagnostics bad;
  planner::parse_profile("efficiency: {linear: {huge: 0.3}}\n", "bad.yaml", bad);
  ASSERT_FALSE(bad.empty());
  EXPECT_NE(bad.all()[0].message.find("not a shape class"), std::string::npos);
}
