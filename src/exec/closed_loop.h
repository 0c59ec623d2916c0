// The trainer's closed loop (issue 5): over steps 3 to 12 of a run under a plan, the measured step time (the
// median of PlanRunner::step's wall time) beside the cost model's prediction, and per pipeline position the
// devices' measured forward+backward busy time beside the predicted one; a warning when the step times differ
// by more than 25%. The trainer prints the lines and writes the figures into its metrics file.
#pragma once
#include <cstdio>
#include <optional>
#include <vector>

#include "exec/pipeline.h"
#include "io/metrics.h"
#include "planner/evaluate.h"

namespace braid::exec {

class ClosedLoop {
 public:
  static constexpr int64_t kFirst = 2, kEnd = 12;  // 0-based step indices of this run: steps 3..12
  static constexpr double kWarnAbove = 0.25;
  // Step `i` (0-based, counted from this run's first step) took `seconds`.
  void record(int64_t i, double seconds, const PlanRunner& pr);
  // After step `i` of `steps`: at the window's end (or the run's last step inside it), prints the comparison
  // and returns the record for the metrics file (step to be set by the caller); otherwise nullopt.
  std::optional<io::MetricsRecord> report(int64_t i, int64_t steps, const planner::StepPrediction& p,
                                          const PlanRunner& pr, FILE* out);

 private:
  std::vector<double> times_;
  std::vector<double> busy0_;
  bool done_ = false;
};

}  // namespace braid::exec
