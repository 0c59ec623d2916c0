// OpenMP-backed parallel_for; static chunking keeps runs bit-reproducible.
#include "core/parallel.h"

#include <omp.h>

#include <algorithm>

namespace braid {

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  int threads = omp_get_max_threads();
  if (n <= grain || threads <= 1 || omp_in_parallel()) {
    fn(0, n);
    return;
  }
  int64_t chunks = std::min<int64_t>(threads, (n + grain - 1) / grain);
  int64_t per = (n + chunks - 1) / chunks;
#pragma omp parallel for schedule(static) num_threads(static_cast<int>(chunks))
  for (int64_t c = 0; c < chunks; ++c) {
    int64_t b = c * per, e = std::min(n, b + per);
    if (b < e) fn(b, e);
  }
}

int num_threads() { return omp_get_max_threads(); }
void set_num_threads(int n) { omp_set_num_threads(std::max(1, n)); }

}  // namespace braid
