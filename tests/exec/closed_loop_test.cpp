// Feeding a run's measurements back (exec/closed_loop.h, fit_feedback): the closed loop's records in a metrics
// file give the profile's busy and tail scales; a model with them predicts the measured step of the run fitted;
// records of other device counts and short tails are passed over; bad files are located errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "exec/closed_loop.h"
#include "graph/build.h"
#include "io/metrics.h"
#include "io/model_spec.h"
#include "planner/cluster.h"
#include "planner/evaluate.h"
#include "planner/search.h"
#include "temp_dir.h"

using namespace braid;

namespace {

std::string temp_file(const std::string& name, const std::string& text) {
  auto p = braid::testing::process_temp_dir() / name;
  std::ofstream(p, std::ios::binary) << text;
  return p.string();
}

// A closed-loop record as the trainer writes it (closed_loop.cpp), with two pipeline positions.
std::string record(int devices, double pred_step, double meas_step, double pred_tail, double pred_busy,
                   double meas_busy, double busy_scale = 1, double tail_scale = 1, int host_cores = 64) {
  io::MetricsRecord r;
  r.step = 12;
  r.extra = {{"predicted_step_s", pred_step},   {"measured_step_s", meas_step},
             {"predicted_tail_s", pred_tail},   {"devices", devices},
             {"host_cores", host_cores},
             {"busy_scale", busy_scale},        {"tail_scale", tail_scale},
             {"predicted_busy_s_0", pred_busy}, {"measured_busy_s_0", meas_busy},
             {"predicted_busy_s_1", pred_busy}, {"measured_busy_s_1", meas_busy}};
  return io::metrics_json(r) + "\n";
}

const std::string kLossLine = "{\"step\":11,\"loss\":2.5,\"lr\":0.001,\"samples_per_s\":900,\"epoch\":0}\n";

}  // namespace

TEST(Feedback, FitsBusyAndTailScalesFromClosedLoopRecords) {
  // Busy measured 1.25x the prediction; the rest of the step, 10 ms - 1.25 x 6 ms = 2.5 ms, 1.25x the predicted
  // 2 ms tail. A second record predicted with those scales and measured as predicted gives them again; a cpu:4
  // record is passed over.
  std::string text = kLossLine + record(2, 8e-3, 10e-3, 2e-3, 12e-3, 15e-3) + kLossLine +
                     record(2, 10e-3, 10e-3, 2.5e-3, 15e-3, 15e-3, 1.25, 1.25) + record(4, 5e-3, 9e-3, 1e-3, 8e-3, 1e-2);
  std::string f = temp_file("fit.jsonl", text);
  int other = -1, tails = -1;
  planner::Profile::Feedback fb = exec::fit_feedback({f}, 2, {}, &other, &tails);
  EXPECT_EQ(fb.devices, 2);
  EXPECT_EQ(fb.records, 2);
  EXPECT_EQ(other, 1);
  EXPECT_EQ(tails, 2);
  EXPECT_NEAR(fb.busy_scale, 1.25, 1e-12);
  EXPECT_NEAR(fb.tail_scale, 1.25, 1e-12);
  // The median of three: 1.0, 1.25 and 2.0 busy.
  std::string g = temp_file("fit3.jsonl", record(2, 8e-3, 8e-3, 2e-3, 12e-3, 12e-3) + record(2, 8e-3, 10e-3, 2e-3, 12e-3, 15e-3) +
                                              record(2, 8e-3, 14e-3, 2e-3, 12e-3, 24e-3));
  EXPECT_NEAR(exec::fit_feedback({g}, 2, {}).busy_scale, 1.25, 1e-12);
  // Several files pool their records.
  EXPECT_EQ(exec::fit_feedback({f, g}, 2, {}).records, 5);
  // A tail under 5% of the step says nothing of the tail: the current scale is kept.
  planner::Profile::Feedback current{2, 1, 1.1, 0.7};
  std::string h = temp_file("short_tail.jsonl", record(2, 10e-3, 11e-3, 0.2e-3, 19.6e-3, 22e-3));
  planner::Profile::Feedback kept = exec::fit_feedback({h}, 2, current, nullptr, &tails);
  EXPECT_EQ(tails, 0);
  EXPECT_EQ(kept.tail_scale, 0.7);
  EXPECT_NEAR(kept.busy_scale, 22.0 / 19.6, 1e-12);
}

// Devices sharing cores (cpu:4 on 2): a device's busy time is measured at the speed it ran, the prediction's at all
// devices' at once, so the fit scales busy and tail alike by the step's ratio (here 1.1, whatever the busy ratio).
TEST(Feedback, DevicesSharingCoresScaleByTheStep) {
  std::string f = temp_file("shared.jsonl", record(4, 7e-3, 7.7e-3, 1e-3, 6.3e-3, 2.8e-3, 1, 1, 2) +
                                                record(4, 7e-3, 7.7e-3, 1e-3, 6.3e-3, 2.8e-3, 1.5, 0.8, 2));
  int tails = -1;
  planner::Profile::Feedback fb = exec::fit_feedback({f}, 4, {}, nullptr, &tails);
  EXPECT_EQ(fb.records, 2);
  EXPECT_EQ(tails, 2);
  EXPECT_NEAR(fb.busy_scale, (1.1 + 1.65) / 2, 1e-9);  // the median of two: each record's B0 x 1.1
  EXPECT_NEAR(fb.tail_scale, (1.1 + 0.88) / 2, 1e-9);
}

// The fitted scales make the calibrated model predict the step it was fitted to: a pipeline of tiny_gpt on cpu:4
// (shared cores: the simulated schedule) "measured" with busy 1.3x and the tail 2x the prediction.
TEST(Feedback, AFedBackModelPredictsTheRunItWasFittedTo) {
  Diagnostics d;
  io::ModelSpec m = io::load_model(std::string(BRAID_SOURCE_DIR) + "/models/tiny_gpt.yaml", {}, d);
  d.throw_if_any();
  graph::Graph g = graph::build_graph(m, 16);
  planner::CpuFigures f = planner::fallback_cpu_figures(4, 2);
  f.cores = 2;
  planner::Profile p;
  p.devices = 4;
  p.cpu = f;
  p.runner = {5e-3, 2e-4, 5e-4};  // a tail of 10% of the step (under 5% it is not fitted)
  auto base = planner::calibrated_cost_model(planner::cluster_preset("cpu:4", f), p);
  planner::TrainSettings ts{16, 2};
  planner::Plan pins;
  pins.summary.pipeline_stages = 4, pins.summary.pinned.set("pipeline_stages", {});
  pins.summary.micro_batches = 8, pins.summary.pinned.set("micro_batches", {});
  planner::SearchOptions so;
  so.pins = &pins;
  planner::SearchResult r = planner::search(g, *base, ts, so);
  ASSERT_TRUE(r.found) << r.why_none;
  planner::StepPrediction pr = planner::predict(r.plan, g, *base, ts);
  ASSERT_GT(pr.tail_s, 0.05 * pr.step_time_s);
  const double busy = pr.stages[0].time() * 8, tail = pr.tail_s;
  const double measured = 1.3 * (pr.step_time_s - tail) + 2 * tail;
  std::string file = temp_file("pipeline.jsonl", record(4, pr.step_time_s, measured, tail, busy, 1.3 * busy));
  planner::Profile::Feedback fb = exec::fit_feedback({file}, 4, {});
  EXPECT_NEAR(fb.busy_scale, 1.3, 1e-9);
  EXPECT_NEAR(fb.tail_scale, 2, 1e-9);
  auto fed = planner::fed_back_cost_model(planner::calibrated_cost_model(planner::cluster_preset("cpu:4", f), p),
                                          fb.busy_scale, fb.tail_scale);
  EXPECT_NEAR(planner::predict(r.plan, g, *fed, ts).step_time_s, measured, 1e-6 * measured);
}

TEST(Feedback, BadMetricsFilesAreLocatedErrors) {
  auto says = [](const std::vector<std::string>& files, const std::string& where, const std::string& what) {
    try {
      exec::fit_feedback(files, 2, {});
      ADD_FAILURE() << "no error for " << files[0];
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(where), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  says({"/nonexistent/metrics.jsonl"}, "/nonexistent/metrics.jsonl", "cannot read");
  std::string broken = temp_file("broken.jsonl", kLossLine + "{\"predicted_step_s\": 0.01, \"measured_step_s\": [1, \n");
  says({broken}, broken + ":2", "not a JSON object");
  std::string old = temp_file("old.jsonl", kLossLine + "{\"step\":12,\"predicted_step_s\":0.01,\"measured_step_s\":0.02}\n");
  says({old}, old + ":2", "older braid");
  std::string none = temp_file("none.jsonl", kLossLine + kLossLine);
  says({none}, "<command line>", "no closed-loop record of a cpu:2 run");
  std::string four = temp_file("four.jsonl", record(4, 5e-3, 9e-3, 1e-3, 8e-3, 1e-2));
  says({four}, "<command line>", "1 of other device counts");
}
