// Joining a job (see rendezvous.h).
#include "distributed/rendezvous.h"

#include <netdb.h>
#include <sys/socket.h>

#include <cstdio>
#include <cstdlib>

#include "core/error.h"
#include "exec/comm/inproc.h"

namespace braid::dist {

std::string heartbeat_key(int rank) { return BRAID_STR("braid/hb/", rank); }

Heartbeat::Heartbeat(const std::string& host, int port, const std::string& token, int rank,
                     std::chrono::milliseconds interval)
    : client_(std::make_unique<StoreClient>(host, port, token)), rank_(rank), interval_(interval) {
  client_->set(heartbeat_key(rank_), "0");
  thread_ = std::thread([this] {
    int64_t beat = 0;
    bool failed = false;
    auto next = std::chrono::steady_clock::now();
    while (!stop_) {
      next += interval_;
      try {
        client_->set(heartbeat_key(rank_), std::to_string(++beat));
      } catch (const StoreError& e) {
        // The store is gone (the job is ending) or slow: keep trying (said once); the launcher judges the ages.
        if (!failed) std::fprintf(stderr, "braid: rank %d: heartbeat failed: %s\n", rank_, e.what());
        failed = true;
      }
      while (!stop_ && std::chrono::steady_clock::now() < next)
        std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(interval_, std::chrono::milliseconds(50)));
    }
  });
}

Heartbeat::~Heartbeat() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

std::string resolve_host(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res); rc != 0 || !res)
    throw UserError({}, BRAID_STR("cannot resolve the store's host '", host, "': ", gai_strerror(rc)));
  char buf[NI_MAXHOST];
  const int rc = ::getnameinfo(res->ai_addr, res->ai_addrlen, buf, sizeof buf, nullptr, 0, NI_NUMERICHOST);
  ::freeaddrinfo(res);
  if (rc != 0) throw UserError({}, BRAID_STR("cannot resolve the store's host '", host, "': ", gai_strerror(rc)));
  return buf;
}

namespace {

// The job token of a process that a launcher other than braid launch started: the store refuses connections
// without it, so its absence is said in the launcher's terms, with the way to give one.
std::string job_token_for(const DistEnv& env) {
  const char* t = std::getenv("BRAID_JOB_TOKEN");
  const char* f = std::getenv("BRAID_JOB_TOKEN_FILE");
  if ((t && *t) || (f && *f)) return load_job_token();
  const bool slurm = env.source == "slurm", mpi = env.source == "openmpi";
  const std::string vars = slurm ? "SLURM_PROCID, SLURM_NTASKS" : mpi ? "OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE" : "RANK, WORLD_SIZE";
  const std::string how = slurm ? "export BRAID_JOB_TOKEN=$(openssl rand -hex 32) before srun (srun passes the environment on)"
                          : mpi ? "BRAID_JOB_TOKEN=$(openssl rand -hex 32) mpirun -x BRAID_JOB_TOKEN ..."
                                : "export BRAID_JOB_TOKEN=$(openssl rand -hex 32) before torchrun, the same value on every node";
  const std::string who = slurm ? "Slurm" : mpi ? "Open MPI" : env.source;
  throw UserError({}, BRAID_STR(who, "'s variables (", vars, ") make this process rank ", env.rank, " of ",
                                env.world_size, ", but no job token is set: the job's rendezvous store admits only "
                                "processes that present it"),
                  BRAID_STR("give every process of the job the same secret: ", how,
                            "; or BRAID_JOB_TOKEN_FILE=PATH naming a file of mode 0600 that holds it, on every node "
                            "(braid launch makes a token itself)"));
}

}  // namespace

Job join_job(const DistEnv& env, JobOptions options) {
  Job job;
  job.env = env;
  if (!env.distributed()) {  // one process: no store, no sockets, no token needed
    job.world = exec::InProcWorld(1, {options.comm.timeout, options.comm.mailbox_capacity}).communicator(0);
    return job;
  }
  const std::string token = job_token_for(env);
  const std::string host = resolve_host(env.master_addr);
  // 1. Rank 0 serves the store unless a launcher does; it binds only the master address.
  if (env.rank == 0 && !env.store_hosted) {
    StoreServerOptions so;
    so.host = host;
    so.port = env.master_port;
    so.token = token;
    try {
      job.server = std::make_unique<StoreServer>(so);
    } catch (const StoreError& e) {
      throw UserError({}, e.what(), BRAID_STR("is MASTER_ADDR=", env.master_addr, " an address of this machine, and port ",
                                              env.master_port, " free?"));
    }
  }
  // 2. A client of it, 3. the heartbeat, 4. the world.
  StoreClientOptions co;
  co.connect_timeout = options.store_timeout;
  job.store = std::make_shared<StoreClient>(host, env.master_port, token, co);
  const auto beat = options.heartbeat_interval.value_or(std::chrono::milliseconds(env.heartbeat_ms));
  if (beat.count() > 0) job.heartbeat = std::make_unique<Heartbeat>(host, env.master_port, token, env.rank, beat);
  job.world = make_tcp_world(job.store, env.rank, env.world_size, options.comm);
  return job;
}

}  // namespace braid::dist
