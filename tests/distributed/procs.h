// Child processes for the distributed tests: fork + exec with extra environment variables, output to a file,
// waiting with a deadline, and cleanup that SIGKILLs whatever is still running when a test ends (so a failed
// test leaves no process behind). Spawned before the test starts threads of its own where it can.
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <fcntl.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <deque>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace braid::testing {

// A loopback port that was free a moment ago (bind to port 0, read it, close).
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

struct Child {
  pid_t pid = -1;
  std::string out_path;  // stdout and stderr together
  int status = -1;       // waitpid status once reaped
  bool reaped = false;
  std::string output() const {
    std::ifstream f(out_path);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  bool exited_with(int code) const { return reaped && WIFEXITED(status) && WEXITSTATUS(status) == code; }
};

inline std::string make_temp_dir() {
  std::string t = "/tmp/braid_dist_test_XXXXXX";
  if (!::mkdtemp(t.data())) std::abort();
  return t;
}

class Procs {
 public:
  ~Procs() { kill_all(); }
  // argv[0] is a path; env entries are added to (or replace in) this process's environment.
  Child& spawn(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
               const std::string& out_path) {
    // Everything is prepared before fork: the child only calls async-signal-safe functions.
    std::vector<std::string> envs;
    for (char** e = environ; *e; ++e) {
      const std::string kv = *e;
      if (!env.count(kv.substr(0, kv.find('=')))) envs.push_back(kv);
    }
    for (const auto& [k, v] : env) envs.push_back(k + "=" + v);
    std::vector<char*> args, envp;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    for (auto& e : envs) envp.push_back(e.data());
    envp.push_back(nullptr);
    const int fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // a test killed by its timeout takes its children with it
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::execve(args[0], args.data(), envp.data());
      ::_exit(127);
    }
    ::close(fd);
    children_.push_back(Child{pid, out_path});
    return children_.back();
  }
  std::deque<Child>& children() { return children_; }
  // Reaps every child or gives up at the deadline; true when all have exited.
  bool wait_all(std::chrono::milliseconds limit) {
    const auto end = std::chrono::steady_clock::now() + limit;
    for (;;) {
      bool all = true;
      for (auto& c : children_) {
        if (c.reaped) continue;
        if (::waitpid(c.pid, &c.status, WNOHANG) == c.pid) c.reaped = true;
        else all = false;
      }
      if (all) return true;
      if (std::chrono::steady_clock::now() > end) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  bool wait_one(Child& c, std::chrono::milliseconds limit) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (!c.reaped) {
      if (::waitpid(c.pid, &c.status, WNOHANG) == c.pid) c.reaped = true;
      else if (std::chrono::steady_clock::now() > end) return false;
      else std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return true;
  }
  void kill_all() {
    for (auto& c : children_)
      if (!c.reaped) {
        ::kill(-c.pid, SIGKILL);
        ::kill(c.pid, SIGKILL);
        ::waitpid(c.pid, &c.status, 0);
        c.reaped = true;
      }
  }

 private:
  std::deque<Child> children_;  // a deque: spawn()'s references stay valid
};

}  // namespace braid::testing
