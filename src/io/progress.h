// Training progress on the terminal. On a TTY: one line redrawn in place (bar, step/total, loss, lr,
// samples/s, ETA), at most ten times a second and always at the last step. Elsewhere (logs, pipes): a plain
// line every `every_steps` steps and at the last one. The output stream, the TTY flag and the clock are
// injected so tests see exactly what a user sees. Not thread-safe; does not write metrics files.
#pragma once
#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace braid::io {

struct ProgressStats {
  int64_t step = 0;  // steps completed, 1-based after the first step
  double loss = 0;
  std::optional<double> lr;
  double samples_per_s = 0;
};

// "42s", "3m07s", "1h02m03s" ("?" when negative or not finite).
std::string format_duration(double seconds);

class Progress {
 public:
  using Clock = std::function<double()>;  // monotonic seconds; default: std::chrono::steady_clock
  // `start_step` is where a resumed run begins (ETA counts only the steps this process ran).
  Progress(std::FILE* out, bool tty, int64_t total_steps, int64_t every_steps, int64_t start_step = 0,
           Clock clock = {});
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // Whether `f` is a terminal (isatty on its descriptor).
  static bool is_tty(std::FILE* f);

  void update(const ProgressStats& s);
  // A line of its own (eval results, "checkpoint saved"), printed without breaking the bar.
  void message(std::string_view line);
  // Ends the bar and prints "done: N steps in 3m07s, final loss 1.2345". Idempotent.
  void finish();

  // The text one update shows (without "\r" or newline); public for tests.
  std::string line(const ProgressStats& s, double now) const;

 private:
  void draw(const ProgressStats& s, double now);
  double now() const;
  std::FILE* out_;
  bool tty_;
  int64_t total_, every_, start_step_;
  Clock clock_;
  double t0_ = 0, last_draw_ = -1e300;
  std::optional<ProgressStats> last_;
  bool bar_on_line_ = false, finished_ = false;
};

// Progress through a known number of bytes (`braid tokenize` reading text). On a TTY: one line redrawn in place
// (bar, MB done/total, MB/s, ETA), at most ten times a second; elsewhere nothing: the command prints its own
// summary. finish() clears the line. Same injection of stream, TTY flag and clock as Progress.
class ByteProgress {
 public:
  using Clock = Progress::Clock;
  ByteProgress(std::FILE* out, bool tty, int64_t total_bytes, std::string what, Clock clock = {});
  ~ByteProgress();
  ByteProgress(const ByteProgress&) = delete;
  ByteProgress& operator=(const ByteProgress&) = delete;
  void update(int64_t done_bytes);
  void finish();
  std::string line(int64_t done_bytes, double now) const;  // public for tests

 private:
  double now() const;
  std::FILE* out_;
  bool tty_;
  int64_t total_;
  std::string what_;
  Clock clock_;
  double t0_ = 0, last_draw_ = -1e300;
  bool on_line_ = false;
};

}  // namespace braid::io
