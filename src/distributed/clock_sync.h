// Clock alignment for one merged trace across processes and hosts: this process's offset from a reference
// clock (the store server's steady clock), estimated as NTP does from a few round trips. For each round,
// t0 = local time before the request, s = the reference's time, t1 = local time after the reply; the
// sample's offset is s - (t0 + t1) / 2 and its error at most (t1 - t0) / 2, so the round with the shortest
// trip wins. It does not follow drift during a run (steady clocks drift by ppm: microseconds per minute).
#pragma once
#include <cstdint>
#include <functional>

namespace braid::dist {

class StoreClient;

struct ClockOffset {
  int64_t offset_ns = 0;  // reference clock = local clock + offset_ns
  int64_t rtt_ns = 0;     // round trip of the chosen sample: the estimate is within rtt_ns / 2
};

// `local_ns` and `reference_ns` read the two clocks; reference_ns is the remote call (it is timed).
ClockOffset estimate_clock_offset(const std::function<int64_t()>& local_ns,
                                  const std::function<int64_t()>& reference_ns, int rounds = 8);

// This process's steady clock (ns since its epoch), as TraceRecorder::origin_steady_ns() counts it.
int64_t steady_now_ns();

// The offset of this process's steady clock from the store server's (StoreClient::server_time_ns).
ClockOffset estimate_store_clock_offset(StoreClient& store, int rounds = 8);

}  // namespace braid::dist
