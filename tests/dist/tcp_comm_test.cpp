// The TCP communicator across real processes: 2, 3 and 4 dist_worker processes (fork + exec) joined through a
// store served by this test. Each worker checks every collective and send/recv bit for bit against the
// in-process backend on the same inputs; mismatches raise the same error on every rank; a peer killed or
// stopped mid-collective makes the others fail, naming it, within the timeout.
#include <gtest/gtest.h>

#include <random>
#include <regex>

#include "dist/store.h"
#include "core/error.h"
#include "procs.h"

using namespace braid;
using namespace braid::dist;
using namespace braid::testing;
using namespace std::chrono_literals;

namespace {

const std::string kToken = "comm-test-token-42";

struct World {
  StoreServer server;
  std::string dir = make_temp_dir();
  Procs procs;

  static StoreServerOptions options() {
    StoreServerOptions o;
    o.token = kToken;
    o.log = [](const std::string&) {};
    return o;
  }
  World() : server(options()) {}
  ~World() {
    procs.kill_all();
    std::system(("rm -rf " + dir).c_str());
  }

  void start(int n, const std::string& scenario, std::map<std::string, std::string> extra = {}) {
    for (int r = 0; r < n; ++r) {
      std::map<std::string, std::string> env = extra;
      env["RANK"] = std::to_string(r);
      env["WORLD_SIZE"] = std::to_string(n);
      env["LOCAL_RANK"] = std::to_string(r);
      env["LOCAL_WORLD_SIZE"] = std::to_string(n);
      env["MASTER_ADDR"] = "127.0.0.1";
      env["MASTER_PORT"] = std::to_string(server.port());
      env["BRAID_STORE_HOSTED"] = "1";
      env["BRAID_JOB_TOKEN"] = kToken;
      procs.spawn({BRAID_BINARY_DIR "/tests/dist_worker", scenario}, env, BRAID_STR(dir, "/rank", r, ".log"));
    }
  }
  std::string logs() {
    std::string s;
    for (auto& c : procs.children()) s += "---- " + c.out_path + "\n" + c.output();
    return s;
  }
};

class TcpComm : public ::testing::TestWithParam<int> {};

TEST_P(TcpComm, EveryCollectiveMatchesInProcBitForBit) {
  const int n = GetParam();
  World w;
  w.start(n, "collectives");
  ASSERT_TRUE(w.procs.wait_all(100s)) << w.logs();
  for (auto& c : w.procs.children()) EXPECT_TRUE(c.exited_with(0)) << w.logs();
  for (auto& c : w.procs.children()) EXPECT_NE(c.output().find("ok "), std::string::npos) << c.output();
}

TEST_P(TcpComm, MismatchRaisesTheSameErrorEverywhereAndTheGroupRecovers) {
  const int n = GetParam();
  World w;
  w.start(n, "mismatch");
  ASSERT_TRUE(w.procs.wait_all(60s)) << w.logs();
  std::string first;
  for (auto& c : w.procs.children()) {
    EXPECT_TRUE(c.exited_with(0)) << w.logs();
    const std::string out = c.output();
    EXPECT_NE(out.find("the ranks called different collectives"), std::string::npos) << out;
    EXPECT_NE(out.find("rank 0 calls all_reduce(f32[4], sum)"), std::string::npos) << out;
    EXPECT_NE(out.find("rank 1 calls all_reduce(f32[5], sum)"), std::string::npos) << out;
    EXPECT_NE(out.find("invalid arguments:\n  rank 1: all_gather: axis 5 is out of range"), std::string::npos) << out;
    EXPECT_NE(out.find("recovered"), std::string::npos) << out;
    // The same message on every rank (after the "rank r: " prefix).
    const std::string msg = std::regex_replace(out, std::regex("(^|\n)rank \\d+: "), "$1");
    if (first.empty()) first = msg;
    EXPECT_EQ(msg, first);
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, TcpComm, ::testing::Values(2, 3, 4));

// Each of 4 ranks splits two groups at once from two threads (the world, and pairs) and all-reduces on both.
TEST(TcpCommThreads, ConcurrentSplitsAndCommunicators) {
  World w;
  w.start(4, "threads");
  ASSERT_TRUE(w.procs.wait_all(60s)) << w.logs();
  for (auto& c : w.procs.children()) EXPECT_TRUE(c.exited_with(0)) << w.logs();
}

// Kills (SIGKILL) or stops (SIGSTOP) the last rank while the others wait in an all-reduce for it.
void lose_last_rank(int n, int sig) {
  World w;
  const auto timeout = sig == SIGKILL ? 60s : 3s;
  w.start(n, "victim", {{"BRAID_TEST_TIMEOUT_MS", std::to_string(std::chrono::milliseconds(timeout).count())}});
  StoreClient store("127.0.0.1", w.server.port(), kToken);
  std::vector<std::string> keys;
  for (int r = 0; r + 1 < n; ++r) keys.push_back(BRAID_STR("braid/test/waiting/", r));
  ASSERT_NO_THROW(store.wait(keys, 60s)) << w.logs();
  std::this_thread::sleep_for(200ms);  // let them enter the all-reduce (they fail the same way if not yet in)
  Child& victim = w.procs.children().back();
  const auto t0 = std::chrono::steady_clock::now();
  ::kill(victim.pid, sig);
  for (int r = 0; r + 1 < n; ++r) {
    Child& c = w.procs.children()[static_cast<size_t>(r)];
    ASSERT_TRUE(w.procs.wait_one(c, timeout + 5s)) << "rank " << r << " still running\n" << w.logs();
    EXPECT_TRUE(c.exited_with(3)) << w.logs();
    const std::string out = c.output();
    const std::string last = std::to_string(n - 1);
    if (sig == SIGKILL)
      EXPECT_NE(out.find("connection to rank " + last + " (world rank " + last + ") lost"), std::string::npos) << out;
    else
      EXPECT_NE(out.find("waiting for ranks [" + last + " (world rank " + last + ")]"), std::string::npos) << out;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, timeout + 5s);
}

TEST(TcpCommFailure, KilledPeerIsNamedByEveryOtherRank) {
  lose_last_rank(3, SIGKILL);
}

TEST(TcpCommFailure, StoppedPeerTimesOutNamingIt) {
  lose_last_rank(2, SIGSTOP);
}

// abort() on one rank, and a recv of the wrong shape (which aborts), end every rank's wait with the reason.
TEST(TcpCommFailure, AbortReachesEveryRank) {
  for (const std::string mode : {"call", "recv"}) {
    World w;
    w.start(3, "abort", {{"BRAID_TEST_ABORT", mode}, {"BRAID_TEST_TIMEOUT_MS", "60000"}});
    ASSERT_TRUE(w.procs.wait_all(30s)) << w.logs();
    for (auto& c : w.procs.children()) {
      EXPECT_TRUE(c.exited_with(3)) << w.logs();
      const std::string want = mode == "call" ? "aborted by world rank 0: stopping for a test"
                                              : "rank 0 expects f32[4] but rank 1 sent f32[3]";
      EXPECT_NE(c.output().find(want), std::string::npos) << mode << "\n" << c.output();
    }
  }
}

// Ten trials: a random rank of 4 is SIGKILLed at a random moment while all of them all-reduce in a loop
// (so mid-frame, mid-fold or between collectives); every other rank must exit with an error naming it.
TEST(TcpCommFailure, KillAtRandomMomentsTenTrials) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 10; ++trial) {
    World w;
    const int n = 4, victim = static_cast<int>(rng() % n);
    w.start(n, "loop", {{"BRAID_TEST_TIMEOUT_MS", "30000"}});
    StoreClient store("127.0.0.1", w.server.port(), kToken);
    std::vector<std::string> keys;
    for (int r = 0; r < n; ++r) keys.push_back(BRAID_STR("braid/test/looping/", r));
    ASSERT_NO_THROW(store.wait(keys, 60s)) << w.logs();
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 200));
    const auto t0 = std::chrono::steady_clock::now();
    ::kill(w.procs.children()[static_cast<size_t>(victim)].pid, SIGKILL);
    const std::string name = BRAID_STR("rank ", victim, " (world rank ", victim, ") lost");
    for (int r = 0; r < n; ++r) {
      if (r == victim) continue;
      Child& c = w.procs.children()[static_cast<size_t>(r)];
      ASSERT_TRUE(w.procs.wait_one(c, 35s)) << "trial " << trial << ": rank " << r << " still running\n" << w.logs();
      EXPECT_TRUE(c.exited_with(3)) << "trial " << trial << "\n" << w.logs();
      EXPECT_NE(c.output().find(name), std::string::npos) << "trial " << trial << ", victim " << victim << "\n" << c.output();
    }
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 35s);
  }
}

}  // namespace
