// Intra-op parallelism: parallel_for over [0, n) in contiguous chunks on OpenMP threads.
// Chunks are fixed by n and grain (never by timing), so results that depend on chunking are reproducible.
#pragma once
#include <cstdint>
#include <functional>

namespace braid {

// Calls fn(begin, end) on disjoint chunks covering [0, n); runs inline when n <= grain.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);
int num_threads();
void set_num_threads(int n);

}  // namespace braid
