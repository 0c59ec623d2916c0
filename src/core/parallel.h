// Intra-op parallelism: parallel_for over [0, n) in contiguous chunks on OpenMP threads.
// Chunks are fixed by n, grain and the thread count (never by timing), so results that depend on chunking
// are reproducible. A template (no std::function), so a call allocates nothing.
#pragma once
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace braid {

// Calls fn(begin, end) on disjoint chunks covering [0, n); runs inline when n <= grain.
template <typename F>
void parallel_for(int64_t n, int64_t grain, const F& fn) {
  if (n <= 0) return;
  const int threads = omp_get_max_threads();
  if (n <= grain || threads <= 1 || omp_in_parallel()) {
    fn(int64_t{0}, n);
    return;
  }
  const int64_t chunks = std::min<int64_t>(threads, (n + grain - 1) / grain);
  const int64_t per = (n + chunks - 1) / chunks;
#pragma omp parallel for schedule(static) num_threads(static_cast<int>(chunks))
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t b = c * per, e = std::min(n, b + per);
    if (b < e) fn(b, e);
  }
}

int num_threads();
void set_num_threads(int n);

// Pins the calling thread to the `slot`-th of `slots` equal shares of the CPUs this process may use (slots
// beyond the CPUs wrap round them), so that N device threads (cpu:N) spread evenly over the cores instead of
// wherever the scheduler wakes them; threads it then starts (its OpenMP team) inherit the share. Returns
// false (and changes nothing) where affinity cannot be set.
bool pin_thread_to_share(int slot, int slots);
// CPUs this process may use (its affinity mask), at least 1.
int allowed_cpus();
// Slots for pin_thread_to_share(slot, loads.size()) on `cpus` CPUs that balance the threads' `loads` over the
// CPU shares those slots map to: largest load first onto the least loaded share (ties: the one with fewer
// threads, then the lower index). Equal loads get i % shares (round robin, as pin_thread_to_share(i, n) places
// them); where every thread has a share of its own, i.
std::vector<int> balanced_slots(const std::vector<double>& loads, int cpus = allowed_cpus());

}  // namespace braid
