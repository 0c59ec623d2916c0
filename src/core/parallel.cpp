// Thread-count control for parallel_for (OpenMP).
#include "core/parallel.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <vector>

namespace braid {

int num_threads() { return omp_get_max_threads(); }
void set_num_threads(int n) { omp_set_num_threads(std::max(1, n)); }

bool pin_thread_to_share(int slot, int slots) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (slots < 1 || sched_getaffinity(0, sizeof allowed, &allowed) != 0) return false;
  std::vector<int> cpus;
  for (int i = 0; i < CPU_SETSIZE; ++i)
    if (CPU_ISSET(i, &allowed)) cpus.push_back(i);
  if (cpus.empty()) return false;
  const int n = static_cast<int>(cpus.size());
  const int per = std::max(1, n / slots);           // CPUs per share
  const int first = (slot % std::max(1, n / per)) * per;  // shares beyond the CPUs wrap round them
  cpu_set_t mine;
  CPU_ZERO(&mine);
  for (int k = 0; k < per && first + k < n; ++k) CPU_SET(cpus[static_cast<size_t>(first + k)], &mine);
  return pthread_setaffinity_np(pthread_self(), sizeof mine, &mine) == 0;
}

int allowed_cpus() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return 1;
  return std::max(1, CPU_COUNT(&allowed));
}

std::vector<int> balanced_slots(const std::vector<double>& loads, int cpus) {
  const int slots = static_cast<int>(loads.size());
  std::vector<int> out(loads.size());
  for (int i = 0; i < slots; ++i) out[static_cast<size_t>(i)] = i;
  if (slots == 0) return out;
  const int n = std::max(1, cpus);
  const int per = std::max(1, n / slots);
  const int shares = std::max(1, n / per);  // distinct CPU sets pin_thread_to_share hands out: slot % shares
  if (shares >= slots) return out;
  std::vector<int> order = out;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return loads[static_cast<size_t>(a)] > loads[static_cast<size_t>(b)]; });
  std::vector<double> load(static_cast<size_t>(shares), 0);
  std::vector<int> used(static_cast<size_t>(shares), 0);
  for (int i : order) {
    int best = 0;
    for (int c = 1; c < shares; ++c)
      if (load[static_cast<size_t>(c)] < load[static_cast<size_t>(best)] ||
          (load[static_cast<size_t>(c)] == load[static_cast<size_t>(best)] && used[static_cast<size_t>(c)] < used[static_cast<size_t>(best)]))
        best = c;
    load[static_cast<size_t>(best)] += loads[static_cast<size_t>(i)];
    ++used[static_cast<size_t>(best)];
    out[static_cast<size_t>(i)] = best;  // pin_thread_to_share maps slot s to share s % shares
  }
  return out;
}

}  // namespace braid
