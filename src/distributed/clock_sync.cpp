// Clock offset to a reference clock from timed round trips (see clock_sync.h).
#include "distributed/clock_sync.h"

#include <chrono>

#include "core/error.h"
#include "distributed/store.h"

namespace braid::dist {

ClockOffset estimate_clock_offset(const std::function<int64_t()>& local_ns,
                                  const std::function<int64_t()>& reference_ns, int rounds) {
  BRAID_ASSERT(rounds > 0, "clock offset from ", rounds, " rounds");
  ClockOffset best{0, INT64_MAX};
  for (int i = 0; i < rounds; ++i) {
    const int64_t t0 = local_ns();
    const int64_t s = reference_ns();
    const int64_t t1 = local_ns();
    const int64_t rtt = t1 - t0;
    if (rtt < best.rtt_ns) best = {s - (t0 + rtt / 2), rtt};
  }
  return best;
}

int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

ClockOffset estimate_store_clock_offset(StoreClient& store, int rounds) {
  return estimate_clock_offset(steady_now_ns, [&store] { return store.server_time_ns(); }, rounds);
}

}  // namespace braid::dist
