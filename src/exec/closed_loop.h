// The trainer's closed loop (issue 5): over steps 3 to 12 of a run under a plan, the measured step time (the
// median of Engine::step's wall time) beside the cost model's prediction, and per pipeline position the
// devices' measured forward+backward busy time beside the predicted one; a warning when the step times differ
// by more than 25%. The trainer prints the lines and writes the figures into its metrics file, from which
// `braid calibrate --from-run` fits the profile's feedback (fit_feedback below; docs/planner.md, "Feeding a run's
// measurements back").
#pragma once
#include <cstdio>
#include <optional>
#include <vector>

#include <string>

#include "exec/engine.h"
#include "exec/run_setup.h"
#include "io/metrics.h"
#include "planner/cost_model.h"

namespace braid::exec {

class ClosedLoop {
 public:
  static constexpr int64_t kFirst = 2, kEnd = 12;  // 0-based step indices of this run: steps 3..12
  static constexpr double kWarnAbove = 0.25;
  // Step `i` (0-based, counted from this run's first step) took `seconds`.
  void record(int64_t i, double seconds, const Engine& pr);
  // After step `i` of `steps`: at the window's end (or the run's last step inside it), prints the comparison
  // and returns the record for the metrics file (step to be set by the caller); otherwise nullopt.
  // The record holds predicted_step_s, measured_step_s, predicted_tail_s, per pipeline position k
  // predicted_busy_s_k and measured_busy_s_k, devices, host_cores, and the busy_scale and tail_scale the
  // prediction's model already had (CostModel::busy_scale).
  std::optional<io::MetricsRecord> report(int64_t i, int64_t steps, const RunPlan& run, const Engine& pr,
                                          FILE* out, const std::string& metrics_path = "");

 private:
  std::vector<double> times_;
  std::vector<double> busy0_;
  bool done_ = false;
};

// The feedback for cpu:`devices` from the closed-loop records of these metrics files (JSON lines; other records
// are passed over). Per record, with B0 and T0 the scales its prediction had:
//   busy_scale = B0 x (sum of measured busy) / (sum of predicted busy)
//   tail_scale = T0 x (measured step - (measured / predicted busy) x (predicted step - predicted tail)) / predicted tail
// (the latter only where the predicted tail is at least 5% of the step and the figure lies within 0.1..10); for
// a run whose devices outnumber the host's cores (the record's host_cores), both B0 and T0 times measured step /
// predicted step (a device's busy time there is not comparable with the all-busy prediction);
// the medians over the records are kept (tail_scale: `current`'s where no record gives one). Records of other
// device counts are counted in *other_devices. A file that cannot be read, or a closed-loop record that is not
// one, is a UserError at file:line; no usable record is a UserError naming the files.
planner::Profile::Feedback fit_feedback(const std::vector<std::string>& metrics_files, int devices,
                                        const planner::Profile::Feedback& current, int* other_devices = nullptr,
                                        int* tail_records = nullptr);

}  // namespace braid::exec
