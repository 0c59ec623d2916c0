// braid launch, run as the real binary over dist_worker: rank-prefixed output, the exit status of a failed
// rank, a killed rank and a stopped (heartbeat-less) rank named within timeout + 5 s with no process left
// behind, and SIGTERM forwarded to every rank.
#include <gtest/gtest.h>

#include <cerrno>
#include <csignal>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <regex>

#include "procs.h"

using namespace braid::testing;
using namespace std::chrono_literals;

namespace {

const std::string kBraid = BRAID_BINARY_DIR "/braid";
const std::string kWorker = BRAID_BINARY_DIR "/tests/dist_worker";

struct Launch {
  std::string dir = make_temp_dir();
  Procs procs;
  Child* launcher = nullptr;
  ~Launch() {
    procs.kill_all();
    std::system(("rm -rf " + dir).c_str());
  }
  void start(std::vector<std::string> launch_args, const std::string& scenario,
             std::map<std::string, std::string> env = {}) {
    std::vector<std::string> argv = {kBraid, "launch"};
    argv.insert(argv.end(), launch_args.begin(), launch_args.end());
    argv.insert(argv.end(), {"--", kWorker, scenario});
    launcher = &procs.spawn(argv, env, dir + "/launch.log");
  }
  // The pids the n sleeping ranks of this launcher print (in rank order), once all have.
  std::vector<int> wait_pids(int n) {
    const auto end = std::chrono::steady_clock::now() + 60s;
    while (std::chrono::steady_clock::now() < end) {
      const std::string out = launcher->output();
      const std::regex re(R"(\[rank (\d+)\] rank \d+: sleeping pid (\d+))");
      std::map<int, int> pids;
      for (std::sregex_iterator it(out.begin(), out.end(), re), e; it != e; ++it)
        pids[std::stoi((*it)[1])] = std::stoi((*it)[2]);
      if (static_cast<int>(pids.size()) == n) {
        std::vector<int> v;
        for (auto& [r, pid] : pids) v.push_back(pid);
        return v;
      }
      std::this_thread::sleep_for(20ms);
    }
    return {};
  }
};

std::string prefix(int r) { return "[rank " + std::to_string(r) + "]"; }

bool gone(int pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

TEST(Launch, PrefixesOutputByRankAndExitsZero) {
  Launch l;
  l.start({"--nproc", "3"}, "echo");
  ASSERT_TRUE(l.procs.wait_one(*l.launcher, 60s)) << l.launcher->output();
  const std::string out = l.launcher->output();
  EXPECT_TRUE(l.launcher->exited_with(0)) << out;
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(out.find(prefix(r) + " hello from rank " + std::to_string(r) + " of 3\n"), std::string::npos) << out;
    EXPECT_NE(out.find(prefix(r) + " second line\n"), std::string::npos) << out;
    EXPECT_NE(out.find(prefix(r) + " a line on stderr\n"), std::string::npos) << out;
  }
}

// Issue 24: the launcher serves the store and is its client; the ranks it starts inherit none of those sockets.
TEST(Launch, RanksInheritNoSocketOfTheLauncher) {
  Launch l;
  l.launcher = &l.procs.spawn({kBraid, "launch", "--nproc", "2", "--", "find", "/proc/self/fd", "-mindepth", "1",
                               "-printf", "%f %l\n"},
                              {}, l.dir + "/launch.log");
  ASSERT_TRUE(l.procs.wait_one(*l.launcher, 60s)) << l.launcher->output();
  const std::string out = l.launcher->output();
  EXPECT_TRUE(l.launcher->exited_with(0)) << out;
  EXPECT_NE(out.find(prefix(0) + " 1 pipe:"), std::string::npos) << out;  // the listing is there: stdout, a pipe
  EXPECT_NE(out.find(prefix(1) + " 1 pipe:"), std::string::npos) << out;
  EXPECT_EQ(out.find("socket:"), std::string::npos) << out;
}

TEST(Launch, FailedRanksStatusIsTheLaunchersAndNamed) {
  Launch l;
  l.start({"--nproc", "2"}, "echo", {{"BRAID_TEST_EXIT_RANK", "1"}, {"BRAID_TEST_EXIT_CODE", "7"}});
  ASSERT_TRUE(l.procs.wait_one(*l.launcher, 60s));
  const std::string out = l.launcher->output();
  EXPECT_TRUE(l.launcher->exited_with(7)) << out;
  EXPECT_NE(out.find("braid launch: rank 1 (pid "), std::string::npos) << out;
  EXPECT_NE(out.find("exited with status 7"), std::string::npos) << out;
}

TEST(Launch, KilledRankStopsTheJobNamingIt) {
  Launch l;
  l.start({"--nproc", "3", "--grace-ms", "2000"}, "sleep");
  const std::vector<int> pids = l.wait_pids(3);
  ASSERT_EQ(pids.size(), 3u) << l.launcher->output();
  const auto t0 = std::chrono::steady_clock::now();
  ::kill(pids[1], SIGKILL);
  ASSERT_TRUE(l.procs.wait_one(*l.launcher, 2s + 5s)) << l.launcher->output();
  const std::string out = l.launcher->output();
  EXPECT_TRUE(l.launcher->exited_with(128 + SIGKILL)) << out;
  EXPECT_NE(out.find("rank 1 (pid " + std::to_string(pids[1]) + ") was killed by signal 9"), std::string::npos) << out;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 7s);
  for (int pid : pids) EXPECT_TRUE(gone(pid)) << "pid " << pid << " left behind";
}

TEST(Launch, StuckRankIsDetectedByHeartbeat) {
  Launch l;
  l.start({"--nproc", "2", "--grace-ms", "1000", "--heartbeat-interval-ms", "100", "--heartbeat-timeout-ms", "4000"},
          "sleep");
  const std::vector<int> pids = l.wait_pids(2);
  ASSERT_EQ(pids.size(), 2u) << l.launcher->output();
  const auto t0 = std::chrono::steady_clock::now();
  ::kill(pids[0], SIGSTOP);
  ASSERT_TRUE(l.procs.wait_one(*l.launcher, 4s + 5s)) << l.launcher->output();
  const std::string out = l.launcher->output();
  EXPECT_TRUE(l.launcher->exited_with(1)) << out;
  EXPECT_NE(out.find("rank 0 (pid " + std::to_string(pids[0]) + ") sent no heartbeat"), std::string::npos) << out;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 9s);
  for (int pid : pids) EXPECT_TRUE(gone(pid)) << "pid " << pid << " left behind";
}

TEST(Launch, SigtermIsForwardedToEveryRank) {
  Launch l;
  l.start({"--nproc", "2"}, "sleep");
  const std::vector<int> pids = l.wait_pids(2);
  ASSERT_EQ(pids.size(), 2u) << l.launcher->output();
  ::kill(l.launcher->pid, SIGTERM);
  ASSERT_TRUE(l.procs.wait_one(*l.launcher, 20s)) << l.launcher->output();
  const std::string out = l.launcher->output();
  EXPECT_TRUE(l.launcher->exited_with(128 + SIGTERM)) << out;
  EXPECT_NE(out.find("forwarding it to every rank"), std::string::npos) << out;
  for (int pid : pids) EXPECT_TRUE(gone(pid)) << "pid " << pid << " left behind";
}


// Two launchers on this machine as two "nodes" of 2 processes each: one world of 4, every collective
// checked against the in-process backend; then a rank of node 1 killed, which node 0's launcher reports too.
TEST(Launch, TwoNodesFormOneWorld) {
  Launch n0, n1;
  const std::string master = "127.0.0.1:" + std::to_string(free_port());
  const std::map<std::string, std::string> env = {{"BRAID_JOB_TOKEN", "two-node-test-token"}};
  n0.start({"--nproc", "2", "--nnodes", "2", "--node-rank", "0", "--master", master}, "collectives", env);
  n1.start({"--nproc", "2", "--nnodes", "2", "--node-rank", "1", "--master", master}, "collectives", env);
  ASSERT_TRUE(n1.procs.wait_one(*n1.launcher, 100s)) << n1.launcher->output();
  ASSERT_TRUE(n0.procs.wait_one(*n0.launcher, 20s)) << n0.launcher->output();
  EXPECT_TRUE(n0.launcher->exited_with(0)) << n0.launcher->output();
  EXPECT_TRUE(n1.launcher->exited_with(0)) << n1.launcher->output();
  for (int r = 0; r < 4; ++r)
    EXPECT_NE((r < 2 ? n0 : n1).launcher->output().find(prefix(r) + " rank " + std::to_string(r) + ": ok "),
              std::string::npos)
        << n0.launcher->output() << n1.launcher->output();
}

TEST(Launch, AnotherNodesFailureStopsThisNode) {
  Launch n0, n1;
  const std::string master = "127.0.0.1:" + std::to_string(free_port());
  const std::map<std::string, std::string> env = {{"BRAID_JOB_TOKEN", "two-node-test-token"}};
  n0.start({"--nproc", "1", "--nnodes", "2", "--node-rank", "0", "--master", master, "--grace-ms", "1000"}, "sleep", env);
  n1.start({"--nproc", "1", "--nnodes", "2", "--node-rank", "1", "--master", master, "--grace-ms", "1000"}, "sleep", env);
  const std::vector<int> p0 = n0.wait_pids(1), p1 = n1.wait_pids(1);
  ASSERT_EQ(p1.size(), 1u) << n1.launcher->output();
  ASSERT_EQ(p0.size(), 1u) << n0.launcher->output();
  ::kill(p1[0], SIGKILL);
  ASSERT_TRUE(n1.procs.wait_one(*n1.launcher, 10s)) << n1.launcher->output();
  ASSERT_TRUE(n0.procs.wait_one(*n0.launcher, 10s)) << n0.launcher->output();
  EXPECT_TRUE(n1.launcher->exited_with(128 + SIGKILL)) << n1.launcher->output();
  EXPECT_TRUE(n0.launcher->exited_with(1)) << n0.launcher->output();
  EXPECT_NE(n0.launcher->output().find("another node failed: node 1: rank 1 (pid " + std::to_string(p1[0]) +
                                       ") was killed by signal 9"),
            std::string::npos)
      << n0.launcher->output();
  EXPECT_TRUE(gone(p0[0]));
}

// Two "hosts": network namespaces joined by a veth pair, each with its own address, set up and torn down
// here (needs root; skipped, saying so, elsewhere). The store binds node 0's address only; each rank's
// communicator listens on the address it reaches the store from.
class TwoHosts {
 public:
  TwoHosts() {
    const std::string id = std::to_string(::getpid());
    a_ = "braid" + id + "a";
    b_ = "braid" + id + "b";
    const std::string va = "bv" + id + "a", vb = "bv" + id + "b";
    ok_ = ::geteuid() == 0 && run("ip netns add " + a_) && run("ip netns add " + b_) &&
          run("ip link add " + va + " netns " + a_ + " type veth peer name " + vb + " netns " + b_) &&
          run("ip -n " + a_ + " addr add 10.213.7.1/24 dev " + va) && run("ip -n " + b_ + " addr add 10.213.7.2/24 dev " + vb) &&
          run("ip -n " + a_ + " link set " + va + " up") && run("ip -n " + b_ + " link set " + vb + " up") &&
          run("ip -n " + a_ + " link set lo up") && run("ip -n " + b_ + " link set lo up");
  }
  ~TwoHosts() {  // deleting a namespace deletes its end of the veth pair, and so the pair
    run("ip netns del " + a_);
    run("ip netns del " + b_);
  }
  bool ok() const { return ok_; }
  const std::string& a() const { return a_; }
  const std::string& b() const { return b_; }

 private:
  static bool run(const std::string& cmd) { return std::system((cmd + " 2>/dev/null").c_str()) == 0; }
  std::string a_, b_;
  bool ok_ = false;
};

TEST(Launch, TwoHostsInNetworkNamespaces) {
  TwoHosts hosts;
  if (!hosts.ok()) GTEST_SKIP() << "needs root and ip netns (network namespaces joined by a veth pair)";
  std::string dir = make_temp_dir();
  Procs procs;
  const std::map<std::string, std::string> env = {{"BRAID_JOB_TOKEN", "two-host-test-token"}};
  auto launcher = [&](const std::string& ns, int node, const std::string& log) -> Child& {
    return procs.spawn({"/usr/sbin/ip", "netns", "exec", ns, kBraid, "launch", "--nproc", "2", "--nnodes", "2",
                        "--node-rank", std::to_string(node), "--master", "10.213.7.1:29500", "--", kWorker,
                        "collectives"},
                       env, dir + "/" + log);
  };
  Child& n0 = launcher(hosts.a(), 0, "a.log");
  Child& n1 = launcher(hosts.b(), 1, "b.log");
  ASSERT_TRUE(procs.wait_one(n1, 100s)) << n1.output();
  ASSERT_TRUE(procs.wait_one(n0, 20s)) << n0.output();
  EXPECT_TRUE(n0.exited_with(0)) << n0.output() << n1.output();
  EXPECT_TRUE(n1.exited_with(0)) << n0.output() << n1.output();
  for (int r = 0; r < 4; ++r)
    EXPECT_NE((r < 2 ? n0 : n1).output().find(prefix(r) + " rank " + std::to_string(r) + ": ok "), std::string::npos)
        << n0.output() << n1.output();
  // Network namespaces are different hosts to the transport: each rank reaches its namespace's other rank
  // through shared memory and the other host's two over TCP (the veth pair).
  for (int r = 0; r < 4; ++r)
    EXPECT_NE((r < 2 ? n0 : n1).output().find(prefix(r) + " rank " + std::to_string(r) + ": transport shm send peers 1 recv peers 1"),
              std::string::npos)
        << n0.output() << n1.output();
  procs.kill_all();
  std::system(("rm -rf " + dir).c_str());
}

TEST(Launch, SignalToOneNodeStopsEveryNode) {
  Launch n0, n1;
  const std::string master = "127.0.0.1:" + std::to_string(free_port());
  const std::map<std::string, std::string> env = {{"BRAID_JOB_TOKEN", "two-node-test-token"}};
  n0.start({"--nproc", "1", "--nnodes", "2", "--node-rank", "0", "--master", master}, "sleep", env);
  n1.start({"--nproc", "1", "--nnodes", "2", "--node-rank", "1", "--master", master}, "sleep", env);
  const std::vector<int> p0 = n0.wait_pids(1), p1 = n1.wait_pids(1);
  ASSERT_EQ(p0.size(), 1u) << n0.launcher->output();
  ASSERT_EQ(p1.size(), 1u) << n1.launcher->output();
  ::kill(n0.launcher->pid, SIGTERM);
  ASSERT_TRUE(n1.procs.wait_one(*n1.launcher, 10s)) << n1.launcher->output();
  ASSERT_TRUE(n0.procs.wait_one(*n0.launcher, 10s)) << n0.launcher->output();
  EXPECT_TRUE(n0.launcher->exited_with(128 + SIGTERM)) << n0.launcher->output();
  EXPECT_TRUE(n1.launcher->exited_with(1)) << n1.launcher->output();
  EXPECT_NE(n1.launcher->output().find("another node failed: node 0: interrupted by signal 15"), std::string::npos)
      << n1.launcher->output();
  EXPECT_TRUE(gone(p0[0]));
  EXPECT_TRUE(gone(p1[0]));
}

TEST(Launch, BadOptionsAreUserErrors) {
  Launch l;
  l.start({"--nproc", "2", "--nnodes", "2"}, "echo");
  ASSERT_TRUE(l.procs.wait_one(*l.launcher, 20s));
  EXPECT_TRUE(l.launcher->exited_with(2)) << l.launcher->output();
  EXPECT_NE(l.launcher->output().find("--nnodes > 1 needs --master"), std::string::npos) << l.launcher->output();
}

}  // namespace
