// Terminal progress: an in-place bar on TTYs (rate-limited), plain periodic lines elsewhere.
#include "io/progress.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>

namespace braid::io {

namespace {

constexpr double kMinRedrawSeconds = 0.1;  // at most ~10 redraws a second
constexpr int kBarWidth = 24;

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string fmt_rate(double v) { return v >= 100 ? fmt("%.0f", v) : fmt("%.3g", v); }

}  // namespace

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  auto s = static_cast<int64_t>(std::llround(seconds));
  char buf[48];
  if (s < 60) std::snprintf(buf, sizeof buf, "%llds", static_cast<long long>(s));
  else if (s < 3600) std::snprintf(buf, sizeof buf, "%lldm%02llds", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  else
    std::snprintf(buf, sizeof buf, "%lldh%02lldm%02llds", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  return buf;
}

Progress::Progress(std::FILE* out, bool tty, int64_t total_steps, int64_t every_steps, int64_t start_step, Clock clock)
    : out_(out), tty_(tty), total_(total_steps), every_(every_steps), start_step_(start_step), clock_(std::move(clock)) {
  t0_ = now();
}

Progress::~Progress() {
  if (bar_on_line_ && !finished_) {
    std::fputc('\n', out_);
    std::fflush(out_);
  }
}

bool Progress::is_tty(std::FILE* f) { return f && ::isatty(::fileno(f)) == 1; }

double Progress::now() const {
  if (clock_) return clock_();
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

std::string Progress::line(const ProgressStats& s, double now) const {
  std::string out;
  if (tty_ && total_ > 0) {
    int filled = static_cast<int>(std::clamp<double>(static_cast<double>(s.step) / static_cast<double>(total_), 0, 1) * kBarWidth);
    out += "[" + std::string(static_cast<size_t>(filled), '#') + std::string(static_cast<size_t>(kBarWidth - filled), '.') + "] ";
  }
  out += "step " + std::to_string(s.step);
  if (total_ > 0) out += "/" + std::to_string(total_);
  out += "  loss " + fmt("%.5g", s.loss);
  if (s.lr) out += "  lr " + fmt("%.3g", *s.lr);
  out += "  " + fmt_rate(s.samples_per_s) + " samples/s";
  int64_t done = s.step - start_step_;
  double elapsed = now - t0_;
  if (total_ > 0 && done > 0 && elapsed > 0) {
    double eta = static_cast<double>(total_ - s.step) * elapsed / static_cast<double>(done);
    out += "  ETA " + format_duration(std::max(0.0, eta));
  }
  return out;
}

void Progress::draw(const ProgressStats& s, double t) {
  if (tty_) {
    std::fprintf(out_, "\r%s\x1b[K", line(s, t).c_str());
    bar_on_line_ = true;
  } else {
    std::fprintf(out_, "%s\n", line(s, t).c_str());
  }
  std::fflush(out_);
  last_draw_ = t;
}

void Progress::update(const ProgressStats& s) {
  last_ = s;
  double t = now();
  bool last_step = total_ > 0 && s.step >= total_;
  if (tty_) {
    if (last_step || t - last_draw_ >= kMinRedrawSeconds) draw(s, t);
  } else if (last_step || (every_ > 0 && s.step % every_ == 0)) {
    draw(s, t);
  }
}

void Progress::message(std::string_view text) {
  if (tty_ && bar_on_line_) std::fputs("\r\x1b[K", out_);
  std::fprintf(out_, "%.*s\n", static_cast<int>(text.size()), text.data());
  bar_on_line_ = false;
  if (tty_ && last_ && !finished_) draw(*last_, now());
  std::fflush(out_);
}

void Progress::finish() {
  if (finished_) return;
  double t = now();
  if (tty_ && last_) draw(*last_, t);  // the final state, even if the last update was rate-limited
  if (bar_on_line_) std::fputc('\n', out_);
  bar_on_line_ = false;
  finished_ = true;
  std::string summary = "done: " + std::to_string(last_ ? last_->step - start_step_ : 0) + " steps in " +
                        format_duration(t - t0_);
  if (last_) summary += ", final loss " + fmt("%.5g", last_->loss);
  std::fprintf(out_, "%s\n", summary.c_str());
  std::fflush(out_);
}

// ---- ByteProgress ----

ByteProgress::ByteProgress(std::FILE* out, bool tty, int64_t total_bytes, std::string what, Clock clock)
    : out_(out), tty_(tty), total_(total_bytes), what_(std::move(what)), clock_(std::move(clock)) {
  t0_ = now();
}

ByteProgress::~ByteProgress() { finish(); }

double ByteProgress::now() const {
  if (clock_) return clock_();
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

std::string ByteProgress::line(int64_t done, double t) const {
  const double frac = total_ > 0 ? std::clamp<double>(static_cast<double>(done) / static_cast<double>(total_), 0, 1) : 1;
  const int filled = static_cast<int>(frac * kBarWidth);
  std::string out = "[" + std::string(static_cast<size_t>(filled), '#') +
                    std::string(static_cast<size_t>(kBarWidth - filled), '.') + "] " + what_ + " " +
                    fmt("%.1f", static_cast<double>(done) / 1e6) + "/" + fmt("%.1f", static_cast<double>(total_) / 1e6) +
                    " MB";
  const double elapsed = t - t0_;
  if (elapsed > 0 && done > 0) {
    const double rate = static_cast<double>(done) / elapsed;
    out += "  " + fmt_rate(rate / 1e6) + " MB/s  ETA " + format_duration(static_cast<double>(total_ - done) / rate);
  }
  return out;
}

void ByteProgress::update(int64_t done) {
  if (!tty_) return;
  const double t = now();
  if (done < total_ && t - last_draw_ < kMinRedrawSeconds) return;
  std::fprintf(out_, "\r%s\x1b[K", line(done, t).c_str());
  std::fflush(out_);
  on_line_ = true;
  last_draw_ = t;
}

void ByteProgress::finish() {
  if (!on_line_) return;
  std::fputs("\r\x1b[K", out_);
  std::fflush(out_);
  on_line_ = false;
}

}  // namespace braid::io
