// Terminal progress with a fake clock and an in-memory stream: plain lines every N steps off a TTY, an
// in-place bar redrawn at most ~10x/s on a TTY, messages that do not break the bar, ETA and the summary.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "io/progress.h"

using namespace braid::io;

namespace {

// An in-memory FILE*; text() returns what has been flushed so far.
class MemStream {
 public:
  MemStream() : f_(open_memstream(&buf_, &size_)) {}
  ~MemStream() {
    std::fclose(f_);
    std::free(buf_);
  }
  std::FILE* get() { return f_; }
  std::string text() {
    std::fflush(f_);
    return std::string(buf_, size_);
  }

 private:
  char* buf_ = nullptr;
  size_t size_ = 0;
  std::FILE* f_;
};

size_t count(const std::string& s, const std::string& sub) {
  size_t n = 0;
  for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + 1)) ++n;
  return n;
}

}  // namespace

TEST(Progress, FormatDuration) {
  EXPECT_EQ(format_duration(0), "0s");
  EXPECT_EQ(format_duration(42.4), "42s");
  EXPECT_EQ(format_duration(187), "3m07s");
  EXPECT_EQ(format_duration(3723), "1h02m03s");
  EXPECT_EQ(format_duration(-1), "?");
}

TEST(Progress, PlainLinesEveryNSteps) {
  MemStream out;
  double now = 0;
  {
    Progress p(out.get(), false, 100, 10, 0, [&] { return now; });
    for (int64_t s = 1; s <= 100; ++s) {
      now += 0.5;
      p.update({s, 1.0 / static_cast<double>(s), 1e-3, 256});
    }
    p.finish();
  }
  std::string t = out.text();
  EXPECT_EQ(count(t, "\n"), 11u) << t;  // 10 progress lines + the summary
  EXPECT_EQ(count(t, "\r"), 0u);
  EXPECT_EQ(t.rfind("step 10/100  loss 0.1  lr 0.001  256 samples/s  ETA 45s\n", 0), 0u) << t;
  EXPECT_NE(t.find("step 100/100  loss 0.01"), std::string::npos) << t;
  EXPECT_NE(t.find("done: 100 steps in 50s, final loss 0.01\n"), std::string::npos) << t;
}

TEST(Progress, TtyBarIsRateLimited) {
  MemStream out;
  double now = 0;
  Progress p(out.get(), true, 1000, 10, 0, [&] { return now; });
  for (int64_t s = 1; s <= 1000; ++s) {
    now += 0.002;  // 500 steps a second: 2 s in all
    p.update({s, 2.0, std::nullopt, 64});
  }
  std::string t = out.text();
  size_t draws = count(t, "\r");
  EXPECT_GE(draws, 19u) << t;
  EXPECT_LE(draws, 22u) << t;  // ~10 a second plus the last step
  EXPECT_EQ(count(t, "\n"), 0u);
  EXPECT_NE(t.find("\r[########################] step 1000/1000  loss 2  64 samples/s  ETA 0s\x1b[K"), std::string::npos)
      << t;
  p.finish();
  t = out.text();
  EXPECT_NE(t.find("\x1b[K\ndone: 1000 steps in 2s, final loss 2\n"), std::string::npos) << t;
}

TEST(Progress, MessagesKeepTheBar) {
  MemStream out;
  double now = 0;
  Progress p(out.get(), true, 10, 1, 0, [&] { return now; });
  p.update({1, 3.0, std::nullopt, 10});
  now = 1;
  p.message("eval: loss 2.5");
  std::string t = out.text();
  // The bar is cleared, the message printed on its own line, the bar redrawn below it.
  EXPECT_NE(t.find("\r\x1b[Keval: loss 2.5\n\r[##"), std::string::npos) << t;
  EXPECT_EQ(count(t, "step 1/10"), 2u) << t;
}

TEST(Progress, ResumedRunEtaCountsOnlyItsSteps) {
  MemStream out;
  double now = 100;
  Progress p(out.get(), false, 100, 10, /*start_step=*/50, [&] { return now; });
  now = 110;
  p.update({60, 1.0, std::nullopt, 1});
  // 10 steps in 10 s, 40 left: 40 s.
  EXPECT_NE(out.text().find("ETA 40s"), std::string::npos) << out.text();
  p.finish();
  EXPECT_NE(out.text().find("done: 10 steps in 10s"), std::string::npos) << out.text();
}

TEST(Progress, DestructorEndsTheBarLine) {
  MemStream out;
  {
    Progress p(out.get(), true, 10, 1);
    p.update({1, 1.0, std::nullopt, 1});
  }
  std::string t = out.text();
  ASSERT_FALSE(t.empty());
  EXPECT_EQ(t.back(), '\n');
  EXPECT_FALSE(Progress::is_tty(out.get()));
}

TEST(ByteProgress, BarRateLimitedOnATtyAndSilentElsewhere) {
  double now = 0;
  MemStream tty;
  {
    ByteProgress p(tty.get(), true, 100'000'000, "tokenize", [&] { return now; });
    now = 1;
    p.update(10'000'000);  // drawn
    now = 1.05;
    p.update(11'000'000);  // within 0.1 s of the last draw: skipped
    now = 2;
    p.update(20'000'000);
    EXPECT_EQ(p.line(20'000'000, 2), "[####....................] tokenize 20.0/100.0 MB  10 MB/s  ETA 8s");
    now = 2.01;
    p.update(100'000'000);  // the end is always drawn
    p.finish();
  }
  const std::string t = tty.text();
  EXPECT_EQ(count(t, "\r["), 3u) << t;
  EXPECT_EQ(t.substr(t.size() - 4), "\r\x1b[K");  // the bar is cleared for the command's summary
  MemStream log;
  {
    ByteProgress p(log.get(), false, 100, "tokenize", [&] { return now; });
    p.update(50);
    p.update(100);
  }
  EXPECT_EQ(log.text(), "");
}
