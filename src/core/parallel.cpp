// Thread-count control for parallel_for (OpenMP).
#include "core/parallel.h"

#include <pthread.h>
#include <sched.h>

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

}  // namespace braid
