// The metrics file: JSON lines, one object per record ({"step": 10, "loss": 2.31, "lr": 0.0003, ...}),
// each line written whole and flushed, so a crashed run leaves only complete lines and `tail -f` works.
// Field order is fixed: step, kind (when set), then loss, lr, samples_per_s when present, then the named
// extras in the order given. braid's trainer writes three kinds (README, "The metrics file"): "train" (a
// logged step, with eval_* when it evaluated), "eval" (the final evaluation) and "prediction" (the planner's
// predicted step time against the measured one). Not thread-safe (one writer per run, on rank 0); never reads the file back.
#pragma once
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace braid::io {

struct MetricsRecord {
  int64_t step = 0;
  std::string kind;  // "train", "eval", "prediction"; not written when empty
  std::optional<double> loss;
  std::optional<double> lr;
  std::optional<double> samples_per_s;
  std::vector<std::pair<std::string, double>> extra;  // e.g. {"eval_loss", 1.9}, {"eval_accuracy", 0.87}
};

// The record as one line of JSON, without the newline.
std::string metrics_json(const MetricsRecord& r);

class MetricsWriter {
 public:
  // Opens `path` for writing; append = true continues an existing file (a resumed run).
  // Throws UserError naming the path when it cannot be opened.
  explicit MetricsWriter(const std::string& path, bool append = false);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  // Writes one line and flushes it; throws UserError when the write fails (disk full).
  void write(const MetricsRecord& r);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
};

}  // namespace braid::io
