// Joining a job from its environment: the store (served here when this is rank 0 and no launcher serves
// it), a client of it, the TCP world communicator, and a heartbeat thread. This is the entry point the
// trainer uses: detect_env() -> join_job() -> world communicator, heartbeat running.
// Heartbeats: every `interval`, key braid/hb/<rank> is rewritten through a connection of the heartbeat's
// own (so a long store wait on the main connection never delays it); the launcher watches their age by
// the server's clock and declares a rank stuck when a beat is older than its timeout.
#pragma once
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "distributed/env.h"
#include "distributed/store.h"
#include "distributed/tcp_comm.h"

namespace braid::dist {

std::string heartbeat_key(int rank);  // "braid/hb/<rank>"

class Heartbeat {
 public:
  Heartbeat(const std::string& host, int port, const std::string& token, int rank,
            std::chrono::milliseconds interval = std::chrono::milliseconds(1000));
  ~Heartbeat();  // stops the thread (within one interval)
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

 private:
  std::unique_ptr<StoreClient> client_;
  int rank_;
  std::chrono::milliseconds interval_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

struct JobOptions {
  std::chrono::milliseconds store_timeout{120'000};  // connecting to the store
  std::optional<std::chrono::milliseconds> heartbeat_interval;  // default: env.heartbeat_ms; 0: no heartbeat
  TcpCommOptions comm;
};

struct Job {
  DistEnv env;
  std::unique_ptr<StoreServer> server;  // rank 0 without a launcher's store
  std::shared_ptr<StoreClient> store;
  std::unique_ptr<Heartbeat> heartbeat;
  std::unique_ptr<exec::Communicator> world;
};

// Serves or reaches the store named by env (the token from load_job_token()), then forms the TCP world.
// Blocks until every rank has joined (or the timeouts); throws UserError for a bad environment or token.
// A job of one process gets an in-process world of one and nothing else (no store, socket or token).
Job join_job(const DistEnv& env, JobOptions options = {});

// A host name or IP address -> the first IPv4/IPv6 address it resolves to (the address itself when numeric).
std::string resolve_host(const std::string& host);

}  // namespace braid::dist
