// Signal handlers for a graceful stop and the one thread that runs them; see signals.h.
#include "exec/signals.h"

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace braid::exec {
namespace {

std::atomic<int> g_taken{0};   // the first signal seen (a second one leaves at once)
std::atomic<int> g_signal{0};  // published once its message is written: what the loop polls
struct sigaction g_old_int, g_old_term;
std::atomic<bool> g_routed{false};
std::atomic<long> g_signal_tid{0};
constexpr size_t kMsgMax = 256;
char g_msg[kMsgMax] = "\nbraid: stopping after this step (saving a checkpoint); signal again to quit at once\n";

void on_signal(int sig) {
  if (g_taken.exchange(sig) != 0) _exit(128 + sig);  // second signal: leave now
  // The message first, then the flag: the loop's own lines (checkpoint saved, exit) come after it, and a
  // process that exits as soon as it sees the flag has already printed it.
  ssize_t ignored = write(STDERR_FILENO, g_msg, std::strlen(g_msg));
  (void)ignored;
  g_signal.store(sig);
}

sigset_t stop_set() {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGINT);
  sigaddset(&s, SIGTERM);
  return s;
}

// The signal thread: takes each SIGINT/SIGTERM and does what the process's disposition says, here.
void signal_thread_main() {
  g_signal_tid.store(static_cast<long>(::syscall(SYS_gettid)));
  const sigset_t set = stop_set();
  for (;;) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) continue;
    struct sigaction cur {};
    sigaction(sig, nullptr, &cur);
    if (cur.sa_flags & SA_SIGINFO) {
      siginfo_t info {};
      info.si_signo = sig;
      cur.sa_sigaction(sig, &info, nullptr);
    } else if (cur.sa_handler == SIG_IGN) {
      continue;
    } else if (cur.sa_handler == SIG_DFL) {
      // Die of the signal, as an unrouted process would (the shell then reports 128 + sig).
      sigset_t one;
      sigemptyset(&one);
      sigaddset(&one, sig);
      pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
      raise(sig);
      _exit(128 + sig);
    } else {
      cur.sa_handler(sig);
    }
  }
}

}  // namespace

void route_signals_to_one_thread() {
  const char* env = std::getenv("BRAID_SIGNAL_THREAD");  // =0: the old delivery to any thread, for A/B trials
  if (env && std::strcmp(env, "0") == 0) return;
  if (g_routed.exchange(true)) return;
  const sigset_t set = stop_set();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread(signal_thread_main).detach();
  while (g_signal_tid.load() == 0) std::this_thread::yield();
}

bool signals_routed() { return g_routed.load(); }
long signal_thread_id() { return g_signal_tid.load(); }

StopSignals::StopSignals() {
  g_taken.store(0);
  g_signal.store(0);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &g_old_int);
  sigaction(SIGTERM, &sa, &g_old_term);
}

StopSignals::~StopSignals() {
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
}

bool StopSignals::stop_requested() { return g_signal.load() != 0; }
int StopSignals::signal_number() { return g_signal.load(); }

void StopSignals::set_stop_message(const char* line) {
  std::snprintf(g_msg, kMsgMax, "\n%s\n", line);
}

}  // namespace braid::exec
