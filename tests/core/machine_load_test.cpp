// core/machine_load.h: another process's CPU time is seen as other load; this process's own is not.
#include "core/machine_load.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <thread>

namespace braid {
namespace {

using Clock = std::chrono::steady_clock;

void spin_for(std::chrono::milliseconds ms) {
  volatile double x = 1;
  for (auto end = Clock::now() + ms; Clock::now() < end;) x = x * 1.0000001 + 1e-9;
}

TEST(MachineLoad, AnotherProcessCountsAndThisOneDoesNot) {
  CpuSample a = CpuSample::now();
  if (a.busy_ticks < 0) GTEST_SKIP() << "/proc/stat is not readable here";
  // A child burning one core while this process sleeps: at least most of a core of other load (more where
  // other work shares the machine; less only if the child could not run, which a 0.6 s window rules out).
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    spin_for(std::chrono::milliseconds(600));
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  CpuSample b = CpuSample::now();
  EXPECT_GE(other_cores(a, b), 0.5);
  // This process burning half a second of CPU time (however long that takes beside other tests): its own
  // ticks grow by about that (clock ticks of 10 ms; per-process and machine accounting differ by a few).
  CpuSample c = CpuSample::now();
  timespec t0{}, t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
  do {
    spin_for(std::chrono::milliseconds(10));
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  } while ((t.tv_sec - t0.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec - t0.tv_nsec) < 0.5);
  CpuSample d = CpuSample::now();
  const double hz = static_cast<double>(sysconf(_SC_CLK_TCK));
  EXPECT_GE(d.self_ticks - c.self_ticks, 0.4 * hz);
  EXPECT_GE(d.busy_ticks - c.busy_ticks, d.self_ticks - c.self_ticks - 0.05 * hz);
  // Unreadable or empty intervals give 0.
  EXPECT_EQ(other_cores(a, a), 0);
  CpuSample bad;
  EXPECT_EQ(other_cores(bad, b), 0);
}

// Other runnable threads: a child spinning on another core is seen (the least of 3 readings, so it must be
// ready throughout), and the wait choice follows the quarter-of-the-cores rule.
TEST(MachineLoad, OtherRunnableSeesASpinningProcessAndTheWaitChoiceFollowsTheRule) {
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    spin_for(std::chrono::milliseconds(400));
    _exit(0);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const int seen = other_runnable(3, 2000);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_GE(seen, 1);
  EXPECT_GE(other_runnable(1, 0), 0);  // readable here (Linux)
  EXPECT_STREQ(openmp_wait_choice(0, 2), "spin");
  EXPECT_STREQ(openmp_wait_choice(1, 2), "passive");
  EXPECT_STREQ(openmp_wait_choice(3, 16), "spin");
  EXPECT_STREQ(openmp_wait_choice(4, 16), "passive");
  EXPECT_STREQ(openmp_wait_choice(-1, 64), "passive");
}

}  // namespace
}  // namespace braid
