// The launcher (see launch.h). One loop polls the children's stdout/stderr pipes and a self-pipe fed by the
// signal handler, reaps children with waitpid(WNOHANG), and every half second checks heartbeats and the
// job-wide abort key. All state lives on the stack of launch(); the handler only writes a byte.
#include "distributed/launch.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <thread>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>

#include "core/error.h"
#include "distributed/rendezvous.h"
#include "distributed/store.h"

namespace braid::dist {

namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kAbortKey = "braid/abort";

int g_signal_pipe = -1;

void on_signal(int sig) {
  const unsigned char b = static_cast<unsigned char>(sig);
  ssize_t ignored = ::write(g_signal_pipe, &b, 1);
  (void)ignored;
}

struct Rank {
  int rank = 0;
  pid_t pid = -1;
  int fd[2] = {-1, -1};   // stdout, stderr pipes (read ends)
  std::string partial[2];  // an unfinished line per stream
  bool running = true;
  int status = 0;
};

std::string describe_status(int status) {
  if (WIFEXITED(status)) return BRAID_STR("exited with status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return BRAID_STR("was killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)), ")");
  return "stopped";
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status) ? WEXITSTATUS(status) : 1;
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

std::pair<std::string, int> split_master(const std::string& m) {
  const size_t colon = m.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == m.size())
    throw UserError({}, BRAID_STR("--master '", m, "' is not ADDR:PORT"));
  const std::string port = m.substr(colon + 1);
  if (port.find_first_not_of("0123456789") != std::string::npos || port.size() > 5 || std::stoi(port) > 65535)
    throw UserError({}, BRAID_STR("--master '", m, "': '", port, "' is not a port"));
  std::string host = m.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return {host, std::stoi(port)};
}

class Launcher {
 public:
  Launcher(const LaunchOptions& o, std::FILE* out, std::FILE* err) : o_(o), out_(out), err_(err) {}
  ~Launcher() { cleanup(); }

  int run() {
    validate();
    setup_token();
    setup_store();
    install_signals();
    for (int i = 0; i < o_.nproc; ++i) spawn(i);
    return loop();
  }

 private:
  void log(const std::string& s) {
    std::fflush(out_);
    std::fprintf(err_, "braid launch: %s\n", s.c_str());
    std::fflush(err_);
  }

  void validate() {
    if (o_.nproc < 1) throw UserError({}, BRAID_STR("--nproc ", o_.nproc, ": at least one process"));
    if (o_.nnodes < 1) throw UserError({}, BRAID_STR("--nnodes ", o_.nnodes, ": at least one node"));
    if (o_.node_rank < 0 || o_.node_rank >= o_.nnodes)
      throw UserError({}, BRAID_STR("--node-rank ", o_.node_rank, " is not below --nnodes ", o_.nnodes));
    if (o_.command.empty()) throw UserError({}, "no command to launch", "braid launch --nproc 2 -- braid train RUN");
    if (o_.nnodes > 1 && o_.master.empty())
      throw UserError({}, "--nnodes > 1 needs --master ADDR:PORT (node 0's address, reachable from every node)");
    if (!o_.master.empty()) {
      auto [host, port] = split_master(o_.master);
      host_ = host;
      port_ = port;
      if (o_.nnodes > 1 && port_ == 0) throw UserError({}, "--master: several nodes need a fixed port, not 0");
    } else {
      host_ = "127.0.0.1";
      port_ = 0;
    }
  }

  void setup_token() {
    // One node: a fresh token. Several: the nodes must share one, given in the environment.
    const std::string token = o_.nnodes == 1 ? generate_token() : load_job_token();
    token_ = token;
    std::string dir = "/tmp/braid_launch_XXXXXX";
    if (!::mkdtemp(dir.data())) throw UserError({}, BRAID_STR("cannot create a temporary folder: ", std::strerror(errno)));
    dir_ = dir;
    token_file_ = write_token_file(dir_, token);
  }

  void setup_store() {
    const std::string ip = resolve_host(host_);
    if (o_.node_rank == 0) {
      StoreServerOptions so;
      so.host = ip;
      so.port = port_;
      so.token = token_;
      so.log = stderr_log("braid launch: store");
      try {
        server_ = std::make_unique<StoreServer>(so);
      } catch (const StoreError& e) {
        throw UserError({}, e.what(), "is the --master address one of this machine's, and the port free?");
      }
      port_ = server_->port();
    }
    StoreClientOptions co;
    co.connect_timeout = std::chrono::milliseconds(120'000);
    co.op_timeout = std::chrono::milliseconds(30'000);
    client_ = std::make_unique<StoreClient>(ip, port_, token_, co);
    // Once the store is up, a lost connection is a lost node 0: reconnecting must give up soon.
    co.connect_timeout = std::chrono::milliseconds(3000);
    co.op_timeout = std::chrono::milliseconds(10'000);
    client_ = client_->clone(co);
    master_ip_ = ip;
  }

  void install_signals() {
    if (::pipe2(sig_pipe_, O_CLOEXEC | O_NONBLOCK) != 0) throw UserError({}, "cannot create a pipe");
    g_signal_pipe = sig_pipe_[1];
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
    struct sigaction ign {};
    ign.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &ign, &old_pipe_);
    signals_installed_ = true;
  }

  void spawn(int local) {
    Rank r;
    r.rank = o_.node_rank * o_.nproc + local;
    int p_out[2], p_err[2];
    if (::pipe2(p_out, O_CLOEXEC) != 0 || ::pipe2(p_err, O_CLOEXEC) != 0)
      throw UserError({}, BRAID_STR("cannot create pipes: ", std::strerror(errno)));
    // Environment and argv are built before fork; the child only calls async-signal-safe functions.
    std::vector<std::string> env;
    std::vector<std::string> ours = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                                     "MASTER_ADDR", "MASTER_PORT", "BRAID_JOB_TOKEN", "BRAID_JOB_TOKEN_FILE",
                                     "BRAID_STORE_HOSTED", "BRAID_LAUNCHED", "BRAID_HEARTBEAT_MS"};
    // The OpenMP wait braid chose for this launcher process (src/cli/main.cpp) is not the user's: the ranks get
    // the rule below instead.
    const bool chosen_wait = std::getenv("BRAID_OPENMP_WAIT") != nullptr;
    if (chosen_wait) ours.insert(ours.end(), {"BRAID_OPENMP_WAIT", "GOMP_SPINCOUNT", "OMP_WAIT_POLICY"});
    for (char** e = environ; *e; ++e) {
      const std::string kv = *e;
      const std::string k = kv.substr(0, kv.find('='));
      if (std::find(ours.begin(), ours.end(), k) == ours.end()) env.push_back(kv);
    }
    env.push_back(BRAID_STR("RANK=", r.rank));
    env.push_back(BRAID_STR("WORLD_SIZE=", o_.nnodes * o_.nproc));
    env.push_back(BRAID_STR("LOCAL_RANK=", local));
    env.push_back(BRAID_STR("LOCAL_WORLD_SIZE=", o_.nproc));
    env.push_back(BRAID_STR("GROUP_RANK=", o_.node_rank));
    env.push_back(BRAID_STR("MASTER_ADDR=", master_ip_));
    env.push_back(BRAID_STR("MASTER_PORT=", port_));
    env.push_back(BRAID_STR("BRAID_JOB_TOKEN_FILE=", token_file_));
    env.push_back("BRAID_STORE_HOSTED=1");
    env.push_back("BRAID_LAUNCHED=1");
    env.push_back(BRAID_STR("BRAID_HEARTBEAT_MS=", o_.heartbeat_interval.count()));
    // The cores are shared by the node's ranks: each gets its share of OpenMP threads (as torchrun sets
    // OMP_NUM_THREADS), and waiting threads sleep instead of spinning (spinning ranks starve each other);
    // a value the user set is kept.
    if (!std::getenv("OMP_NUM_THREADS"))
      env.push_back(BRAID_STR("OMP_NUM_THREADS=",
                              std::max(1u, std::thread::hardware_concurrency() / static_cast<unsigned>(o_.nproc))));
    if (chosen_wait || !std::getenv("OMP_WAIT_POLICY")) env.push_back("OMP_WAIT_POLICY=passive");
    std::vector<char*> envp, argv;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::vector<std::string> args = o_.command;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::string path = args[0];
    if (path.find('/') == std::string::npos) {  // search PATH here, not in the child
      const char* p = std::getenv("PATH");
      std::string dirs = p ? p : "/usr/bin:/bin";
      size_t pos = 0;
      while (pos <= dirs.size()) {
        const size_t c = std::min(dirs.find(':', pos), dirs.size());
        const std::string cand = (c > pos ? dirs.substr(pos, c - pos) : ".") + "/" + args[0];
        if (::access(cand.c_str(), X_OK) == 0) {
          path = cand;
          break;
        }
        pos = c + 1;
      }
    }
    const std::string cannot = BRAID_STR("braid launch: cannot execute ", path, ": ");
    // Signals are blocked across fork: a child must never run the launcher's handler (it would write to the
    // launcher's signal pipe); it restores the default actions, then unblocks, so pending ones still act.
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    ::pthread_sigmask(SIG_BLOCK, &block, &old);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // a launcher killed outright takes its ranks with it
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      sigaction(SIGINT, &dfl, nullptr);
      sigaction(SIGTERM, &dfl, nullptr);
      sigaction(SIGPIPE, &dfl, nullptr);
      sigdelset(&old, SIGINT);  // braid's main blocks both in every thread (exec/signals.h); the mask
      sigdelset(&old, SIGTERM);  // survives exec, and a rank must receive them
      ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
      ::dup2(p_out[1], 1);
      ::dup2(p_err[1], 2);
      ::execve(path.c_str(), argv.data(), envp.data());
      const char* why = errno == ENOENT ? "no such file\n" : errno == EACCES ? "permission denied\n" : "exec failed\n";
      ssize_t ignored = ::write(2, cannot.data(), cannot.size());
      ignored = ::write(2, why, std::strlen(why));
      (void)ignored;
      ::_exit(127);
    }
    const int fork_errno = errno;
    ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
    if (pid < 0) throw UserError({}, BRAID_STR("fork failed: ", std::strerror(fork_errno)));
    ::setpgid(pid, pid);  // also here, so that the group exists before any kill(-pid)
    ::close(p_out[1]);
    ::close(p_err[1]);
    r.pid = pid;
    r.fd[0] = p_out[0];
    r.fd[1] = p_err[0];
    ::fcntl(r.fd[0], F_SETFL, O_NONBLOCK);
    ::fcntl(r.fd[1], F_SETFL, O_NONBLOCK);
    ranks_.push_back(std::move(r));
  }

  void emit(Rank& r, int s, const char* data, size_t n) {
    std::FILE* f = s == 0 ? out_ : err_;
    std::string& part = r.partial[s];
    part.append(data, n);
    size_t start = 0;
    for (size_t nl; (nl = part.find('\n', start)) != std::string::npos; start = nl + 1)
      std::fprintf(f, "[rank %d] %.*s\n", r.rank, static_cast<int>(nl - start), part.data() + start);
    part.erase(0, start);
    std::fflush(f);
  }

  void drain(Rank& r, int s) {
    char buf[65536];
    for (;;) {
      const ssize_t n = ::read(r.fd[s], buf, sizeof buf);
      if (n > 0) {
        emit(r, s, buf, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
      if (!r.partial[s].empty()) emit(r, s, "\n", 1);  // a last line without its newline
      ::close(r.fd[s]);
      r.fd[s] = -1;
      return;
    }
  }

  void signal_all(int sig) {
    for (auto& r : ranks_)
      if (r.running) ::kill(-r.pid, sig);
  }

  // The first failure: say which rank, stop the others, tell the other nodes.
  void fail(const std::string& why, int code) {
    if (failed_) return;
    failed_ = true;
    code_ = code;
    log(BRAID_STR(why, "; stopping the other ranks"));
    try {
      client_->set(kAbortKey, BRAID_STR("node ", o_.node_rank, ": ", why));
    } catch (const StoreError&) {
    }
    signal_all(SIGTERM);
    kill_at_ = Clock::now() + o_.grace;
  }

  void check_store() {
    try {
      if (!failed_) {
        if (auto a = client_->get(kAbortKey)) {
          if (a->rfind(BRAID_STR("node ", o_.node_rank, ":"), 0) != 0) fail(BRAID_STR("another node failed: ", *a), 1);
        }
      }
      if (o_.heartbeat_timeout.count() <= 0) return;
      for (auto& r : ranks_) {
        if (!r.running || failed_) continue;
        const auto age = client_->age_ms(heartbeat_key(r.rank));
        if (age && *age > static_cast<uint64_t>(o_.heartbeat_timeout.count()))
          fail(BRAID_STR("rank ", r.rank, " (pid ", r.pid, ") sent no heartbeat for ", static_cast<double>(*age) / 1000.0,
                         " s (timeout ", static_cast<double>(o_.heartbeat_timeout.count()) / 1000.0, " s): stuck or stopped"),
               1);
      }
    } catch (const StoreError& e) {
      if (!failed_) fail(BRAID_STR("the rendezvous store is unreachable: ", e.what()), 1);
    }
  }

  int loop() {
    auto next_check = Clock::now() + std::chrono::milliseconds(500);
    for (;;) {
      std::vector<pollfd> fds{{sig_pipe_[0], POLLIN, 0}};
      std::vector<std::pair<Rank*, int>> who;
      for (auto& r : ranks_)
        for (int s = 0; s < 2; ++s)
          if (r.fd[s] >= 0) {
            fds.push_back({r.fd[s], POLLIN, 0});
            who.push_back({&r, s});
          }
      ::poll(fds.data(), fds.size(), 100);
      if (fds[0].revents & POLLIN) {
        unsigned char sig = 0;
        while (::read(sig_pipe_[0], &sig, 1) == 1) {
          if (!interrupted_) {
            interrupted_ = sig;
            log(BRAID_STR("received signal ", static_cast<int>(sig), " (", strsignal(sig), "); forwarding it to every rank"));
            signal_all(sig);
            if (o_.nnodes > 1) {  // the other nodes' launchers SIGTERM their ranks too
              try {
                client_->set(kAbortKey, BRAID_STR("node ", o_.node_rank, ": interrupted by signal ", static_cast<int>(sig)));
              } catch (const StoreError&) {
              }
            }
          } else {
            log("second signal: killing every rank");
            signal_all(SIGKILL);
          }
        }
      }
      for (size_t i = 1; i < fds.size(); ++i)
        if (fds[i].revents) drain(*who[i - 1].first, who[i - 1].second);
      for (auto& r : ranks_) {
        if (!r.running) continue;
        if (::waitpid(r.pid, &r.status, WNOHANG) != r.pid) continue;
        r.running = false;
        ::kill(-r.pid, SIGKILL);  // anything the rank left behind in its group
        const bool ok = WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0;
        if (!ok && !failed_ && !interrupted_)
          fail(BRAID_STR("rank ", r.rank, " (pid ", r.pid, ") ", describe_status(r.status)), exit_code_of(r.status));
        else if (!ok && !interrupted_ && kill_at_ == Clock::time_point{})
          kill_at_ = Clock::now() + o_.grace;
        if (!ok && !first_bad_) first_bad_ = exit_code_of(r.status);
      }
      const bool any_running = std::any_of(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.running; });
      const bool any_pipe = std::any_of(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.fd[0] >= 0 || r.fd[1] >= 0; });
      if (!any_running && !any_pipe) break;
      if (!any_running && any_pipe) {  // a grandchild holds a pipe open: the group is gone, stop reading
        for (auto& r : ranks_)
          for (int s = 0; s < 2; ++s)
            if (r.fd[s] >= 0) drain(r, s);
        if (++idle_rounds_ > 20) break;
      }
      if (kill_at_ != Clock::time_point{} && Clock::now() >= kill_at_ && any_running) {
        log(BRAID_STR("grace period of ", static_cast<double>(o_.grace.count()) / 1000.0, " s over: killing what is left"));
        signal_all(SIGKILL);
        kill_at_ = Clock::now() + std::chrono::hours(1);
      }
      if (Clock::now() >= next_check && any_running) {
        check_store();
        next_check = Clock::now() + std::chrono::milliseconds(500);
      }
    }
    finish_nodes();
    if (interrupted_) return 128 + interrupted_;
    if (failed_) return code_;
    return first_bad_;
  }

  // Several nodes: each launcher marks its node done; node 0's (which serves the store) waits for the others
  // before the store goes away with it, so that no node mistakes the end of the job for a lost store.
  void finish_nodes() {
    if (o_.nnodes == 1) return;
    try {
      client_->set(BRAID_STR("braid/node_done/", o_.node_rank), failed_ || first_bad_ || interrupted_ ? "failed" : "ok");
      if (o_.node_rank != 0) return;
      // Normally the others end about when this node does; after a failure they stop their ranks within
      // their grace period. Either way the wait is bounded.
      auto end = Clock::now() + std::chrono::minutes(10);
      bool shortened = false;
      for (int k = 1; k < o_.nnodes && Clock::now() < end; ++k)
        while (Clock::now() < end && !client_->get(BRAID_STR("braid/node_done/", k))) {
          if (!shortened && client_->get(kAbortKey)) {
            end = std::min(end, Clock::now() + o_.grace + std::chrono::seconds(30));
            shortened = true;
          }
          ::poll(nullptr, 0, 100);
        }
    } catch (const StoreError& e) {
      log(BRAID_STR("the rendezvous store went away at the end of the job: ", e.what()));
    }
  }

  void cleanup() {
    for (auto& r : ranks_) {
      if (r.running) {
        ::kill(-r.pid, SIGKILL);
        ::waitpid(r.pid, &r.status, 0);
        r.running = false;
      }
      for (int s = 0; s < 2; ++s)
        if (r.fd[s] >= 0) ::close(r.fd[s]);
    }
    if (signals_installed_) {
      sigaction(SIGINT, &old_int_, nullptr);
      sigaction(SIGTERM, &old_term_, nullptr);
      sigaction(SIGPIPE, &old_pipe_, nullptr);
      g_signal_pipe = -1;
      ::close(sig_pipe_[0]);
      ::close(sig_pipe_[1]);
    }
    if (!token_file_.empty()) ::unlink(token_file_.c_str());
    if (!dir_.empty()) ::rmdir(dir_.c_str());
  }

  LaunchOptions o_;
  std::FILE* out_;
  std::FILE* err_;
  std::string host_, master_ip_, token_, dir_, token_file_;
  int port_ = 0;
  std::unique_ptr<StoreServer> server_;
  std::unique_ptr<StoreClient> client_;
  std::vector<Rank> ranks_;
  int sig_pipe_[2] = {-1, -1};
  bool signals_installed_ = false;
  struct sigaction old_int_ {}, old_term_ {}, old_pipe_ {};
  bool failed_ = false;
  int code_ = 0, first_bad_ = 0, interrupted_ = 0, idle_rounds_ = 0;
  Clock::time_point kill_at_{};
};

}  // namespace

int launch(const LaunchOptions& options, std::FILE* out, std::FILE* err) {
  Launcher l(options, out, err);
  return l.run();
}

}  // namespace braid::dist
