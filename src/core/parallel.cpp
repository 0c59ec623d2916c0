// Thread-count control for parallel_for (OpenMP).
#include "core/parallel.h"

namespace braid {

int num_threads() { return omp_get_max_threads(); }
void set_num_threads(int n) { omp_set_num_threads(std::max(1, n)); }

}  // namespace braid
