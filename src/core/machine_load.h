// Other processes' use of the machine while this process measures something: calibration repeats a
// measurement another process disturbed, and `braid bench` reports the other load beside its figures.
// Read from /proc/stat (all CPUs: user, nice, system, irq, softirq, steal) less this process's own CPU time
// (/proc/self/stat), both in clock ticks. Where /proc is unreadable every figure is 0 (nothing detected).
#pragma once
#include <chrono>

namespace braid {

struct CpuSample {
  long long busy_ticks = -1;  // the machine's busy time (steal included: a hypervisor's other guests)
  long long self_ticks = 0;   // this process's user + system time, all threads
  std::chrono::steady_clock::time_point when;
  static CpuSample now();
};

// Cores' worth of other work between two samples: (machine busy - this process) / wall time. 0 when either
// sample is unreadable or no time passed.
double other_cores(const CpuSample& from, const CpuSample& to);

// Threads of other processes ready to run right now: /proc/stat's procs_running less the reading thread, the
// least of `samples` readings `gap_us` apart (so a short-lived command seen once does not count). -1 where
// /proc/stat has no such line.
int other_runnable(int samples = 3, int gap_us = 1000);

// The OpenMP wait braid asks of libgomp when the user chose none (src/cli/main.cpp applies it by re-executing
// itself once, since libgomp reads it when it loads): "spin" (GOMP_SPINCOUNT=1000: a thread that has done its
// part of a parallel region spins about 10-30 us for the next before it sleeps) where fewer than a quarter of
// the cores have other work ready (`others` * 4 < `cores`; on 2 cores: none), else "passive" (sleep at once: a
// spinning thread holds a core that the thread it waits for may need). others < 0 (unknown): "passive".
const char* openmp_wait_choice(int others, int cores);

}  // namespace braid
