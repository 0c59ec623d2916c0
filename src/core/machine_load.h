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

}  // namespace braid
