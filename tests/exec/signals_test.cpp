// Signal routing (exec/signals.h): SIGINT/SIGTERM reach only the signal thread, never a thread inside a GEMM.
// Delivered inside oneDNN 2.x's JIT sgemm, a signal writes its frame into the heap (oneDNN issue 4845); the
// storm test sends thousands while threads run float GEMMs and must end with the heap intact.
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <thread>
#include <vector>

#include "exec/signals.h"
#include "ops/cpu/kernel_util.h"

namespace braid::exec {
namespace {

std::atomic<long> g_handler_tid{0};
std::atomic<int> g_handled{0};
std::atomic<int> g_elsewhere{0};

void record(int) {
  const long tid = static_cast<long>(::syscall(SYS_gettid));
  if (tid != signal_thread_id()) g_elsewhere.fetch_add(1);
  g_handled.fetch_add(1);
}

// Runs in a child process (a death test): routes, installs `record`, runs GEMMs on two threads and the main
// thread while another thread sends `n` SIGINTs to the process. Exits 0 when every signal ran in the signal
// thread and the GEMMs' results stayed right.
[[noreturn]] void storm(int n) {
  route_signals_to_one_thread();
  struct sigaction sa {};
  sa.sa_handler = record;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  std::atomic<bool> done{false};
  std::atomic<int> wrong{0};
  auto work = [&] {
    const int64_t m = 96, k = 384, nn = 256;
    std::vector<float> a(m * k, 1.0f), b(k * nn, 0.5f), c(m * nn);
    while (!done.load()) {
      ops::cpu::gemm(false, false, m, nn, k, 1.0f, a.data(), k, b.data(), nn, 0.0f, c.data(), nn);
      if (c[0] != 192.0f || c[m * nn - 1] != 192.0f) wrong.fetch_add(1);
    }
  };
  std::vector<std::thread> ts;
  for (int i = 0; i < 2; ++i) ts.emplace_back(work);
  std::thread sender([&] {
    for (int i = 0; i < n; ++i) {
      ::kill(::getpid(), SIGINT);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    done.store(true);
  });
  work();
  sender.join();
  for (auto& t : ts) t.join();
  const bool ok = g_elsewhere.load() == 0 && g_handled.load() > 0 && wrong.load() == 0;
  if (!ok) std::fprintf(stderr, "handled %d, outside the signal thread %d, wrong GEMMs %d\n", g_handled.load(),
                        g_elsewhere.load(), wrong.load());
  std::_Exit(ok ? 0 : 1);
}

TEST(Signals, RoutedToOneThreadWhileGemmsRun) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(storm(3000), ::testing::ExitedWithCode(0), "");
}

// Under SIG_DFL the signal thread makes the process die of the signal, as an unrouted process would.
TEST(Signals, DefaultActionStillKills) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        route_signals_to_one_thread();
        std::signal(SIGTERM, SIG_DFL);
        ::kill(::getpid(), SIGTERM);
        for (;;) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      },
      ::testing::KilledBySignal(SIGTERM), "");
}

// StopSignals under routing: the first signal sets the flag (the handler runs in the signal thread).
TEST(Signals, StopFlagSetThroughTheSignalThread) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        route_signals_to_one_thread();
        StopSignals s;
        ::kill(::getpid(), SIGINT);
        for (int i = 0; i < 2000 && !StopSignals::stop_requested(); ++i)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        std::_Exit(StopSignals::stop_requested() && StopSignals::signal_number() == SIGINT ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "stopping after this step");
}

}  // namespace
}  // namespace braid::exec
