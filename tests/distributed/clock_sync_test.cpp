// Clock offsets for merged traces: the estimator against fake clocks (a remote clock 5 s ahead, round trips
// with asymmetric delays: the shortest trip wins, its error within half of it) and against a live store
// on this machine (the same steady clock: offset within half the round trip).
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "distributed/clock_sync.h"
#include "distributed/store.h"

using namespace braid::dist;

TEST(ClockSync, ShortestRoundTripWins) {
  constexpr int64_t kAhead = 5'000'000'000;  // the reference reads 5 s more than the local clock
  int64_t now = 1'000'000;                     // the local fake clock, ns
  // Request and reply delays per round (ns): the 3rd round is the shortest and symmetric.
  const std::vector<std::pair<int64_t, int64_t>> delays{{900, 100}, {50, 700}, {40, 40}, {300, 20}, {60, 500}};
  size_t round = 0;
  auto local = [&] { return now; };
  auto remote = [&] {
    auto [there, back] = delays[round++];
    now += there;
    const int64_t s = now + kAhead;
    now += back;
    return s;
  };
  ClockOffset o = estimate_clock_offset(local, remote, static_cast<int>(delays.size()));
  EXPECT_EQ(round, delays.size());
  EXPECT_EQ(o.rtt_ns, 80);
  EXPECT_EQ(o.offset_ns, kAhead);
  // Asymmetric delays only: the error stays within half the chosen round trip.
  round = 0;
  const std::vector<std::pair<int64_t, int64_t>> skewed{{900, 100}, {10, 90}, {300, 200}};
  auto remote2 = [&] {
    auto [there, back] = skewed[round++];
    now += there;
    const int64_t s = now - kAhead;
    now += back;
    return s;
  };
  o = estimate_clock_offset(local, remote2, 3);
  EXPECT_EQ(o.rtt_ns, 100);
  EXPECT_LE(std::llabs(o.offset_ns - -kAhead), o.rtt_ns / 2);
}

TEST(ClockSync, StoreOnThisMachineHasNoOffset) {
  StoreServerOptions so;
  so.token = "clock-token-0123456789";
  StoreServer server(so);
  StoreClient client("127.0.0.1", server.port(), so.token);
  const ClockOffset o = estimate_store_clock_offset(client, 8);
  EXPECT_GT(o.rtt_ns, 0);
  EXPECT_LE(std::llabs(o.offset_ns), o.rtt_ns / 2 + 1);  // one steady clock: only the measurement error
}
