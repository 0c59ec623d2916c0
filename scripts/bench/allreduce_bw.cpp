// TCP all-reduce bus bandwidth beside a plain TCP stream between the same processes in the same run (issue 7's
// benchmark; not a test). Run as every rank of a job (scripts/bench/allreduce_bw.sh starts it under braid
// launch). For each size, interleaved: (1) a plain stream: rank 0 writes SIZE bytes to rank 1 over one raw TCP
// socket with 4 MiB send()/recv() calls, rank 1 answers one byte; (2) all_reduce of an f32 tensor of SIZE
// bytes on the TCP world with its automatic transport (shared-memory rings between ranks of one host, unless
// BRAID_DIST_SHM=0); (3) the same on a second TCP world with shared memory off (sockets only). Bus bandwidth
// is NCCL's definition: SIZE * 2(n-1)/n / time, the bytes each rank must send (and receive) for an
// all-reduce. Each figure is the median of REPS timed repetitions after one warm-up, and the spread is the
// lowest and highest of them. Rank 0 prints the table and writes CSV.
// Usage: allreduce_bw CSV_PATH [MIN_MIB (1)] [MAX_MIB (256)] [REPS (5)]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "distributed/rendezvous.h"

using namespace braid;
using namespace braid::dist;
using Clock = std::chrono::steady_clock;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
double lowest(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }
double highest(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }

void die(const std::string& msg) {
  std::fprintf(stderr, "allreduce_bw: %s\n", msg.c_str());
  std::exit(1);
}

// The plain stream's socket pair between ranks 0 (writer) and 1 (reader), set up through the store.
int stream_socket(int rank, StoreClient& store, const std::string& host) {
  if (rank == 1) {
    const int l = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    ::inet_pton(AF_INET, host.c_str(), &a.sin_addr);
    if (::bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(l, 1) != 0) die("listen");
    socklen_t len = sizeof a;
    ::getsockname(l, reinterpret_cast<sockaddr*>(&a), &len);
    store.set("bench/stream", std::to_string(ntohs(a.sin_port)));
    const int fd = ::accept(l, nullptr, nullptr);
    ::close(l);
    return fd;
  }
  const int port = std::stoi(store.wait_get("bench/stream", std::chrono::seconds(60)));
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, host.c_str(), &a.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) die("connect");
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

void write_all(int fd, const char* p, size_t n) {
  while (n) {
    const ssize_t w = ::send(fd, p, std::min<size_t>(n, 4 << 20), MSG_NOSIGNAL);
    if (w <= 0) die("stream write");
    p += w;
    n -= static_cast<size_t>(w);
  }
}
void read_all(int fd, char* p, size_t n) {
  while (n) {
    const ssize_t r = ::recv(fd, p, std::min<size_t>(n, 4 << 20), 0);
    if (r <= 0) die("stream read");
    p += r;
    n -= static_cast<size_t>(r);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) die("usage: allreduce_bw CSV_PATH [MIN_MIB] [MAX_MIB] [REPS]");
  const std::string csv_path = argv[1];
  const int min_mib = argc > 2 ? std::atoi(argv[2]) : 1, max_mib = argc > 3 ? std::atoi(argv[3]) : 256;
  const int reps = argc > 4 ? std::atoi(argv[4]) : 5;
  try {
    const DistEnv env = detect_env();
    if (env.world_size < 2) die("run it with at least 2 processes (braid launch --nproc N)");
    JobOptions opt;
    opt.comm.timeout = std::chrono::seconds(600);
    Job job = join_job(env, opt);
    exec::Communicator& world = *job.world;
    TcpCommOptions sopt = opt.comm;
    sopt.shm = false;
    sopt.key_prefix = "braid/bench_sockets";
    std::unique_ptr<exec::Communicator> sockets = make_tcp_world(job.store, env.rank, env.world_size, sopt);
    const TcpCommStats ts = tcp_comm_stats(world);
    const int n = world.size(), rank = world.rank();
    const int sfd = rank <= 1 ? stream_socket(rank, *job.store, resolve_host(env.master_addr)) : -1;
    std::FILE* csv = nullptr;
    if (rank == 0) {
      csv = std::fopen(csv_path.c_str(), "w");
      if (!csv) die("cannot write " + csv_path);
      std::fprintf(csv,
                   "ranks,bytes,stream_GBps,stream_min_GBps,stream_max_GBps,auto_s,auto_busbw_GBps,auto_ratio,"
                   "auto_min_s,auto_max_s,sockets_s,sockets_busbw_GBps,sockets_ratio,sockets_min_s,sockets_max_s\n");
      std::printf("%d ranks, %u cores; automatic transport: shared memory to %d of %d peers; median of %d (min-max "
                  "in brackets); busbw and stream in GB/s = 1e9 bytes/s\n",
                  n, std::thread::hardware_concurrency(), ts.shm_send_peers, n - 1, reps);
      std::printf("%8s | %18s | %30s %6s | %30s %6s\n", "size", "tcp stream", "all-reduce, automatic: ms", "busbw",
                  "all-reduce, sockets: ms", "busbw");
    }
    std::vector<char> sbuf(rank <= 1 ? (static_cast<size_t>(max_mib) << 20) : 0, 1);
    for (int mib = min_mib; mib <= max_mib; mib *= 2) {
      const size_t bytes = static_cast<size_t>(mib) << 20;
      Tensor t = Tensor::empty({Shape{static_cast<int64_t>(bytes / 4)}, DType::f32});
      for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>((i * 7 + rank) % 13) * 0.25f;
      std::vector<double> stream_s, reduce_s, socket_s;
      for (int rep = 0; rep <= reps; ++rep) {
        // 1. The plain stream, 0 -> 1, while the other ranks wait at the barrier.
        world.barrier();
        const auto s0 = Clock::now();
        if (rank == 0) {
          write_all(sfd, sbuf.data(), bytes);
          char ack;
          read_all(sfd, &ack, 1);
        } else if (rank == 1) {
          read_all(sfd, sbuf.data(), bytes);
          write_all(sfd, "k", 1);
        }
        const double st = std::chrono::duration<double>(Clock::now() - s0).count();
        // 2. The all-reduce, timed from a barrier to a barrier (the slowest rank's time).
        world.barrier();
        const auto r0 = Clock::now();
        world.all_reduce(t);
        world.barrier();
        const double rt = std::chrono::duration<double>(Clock::now() - r0).count();
        // 3. The same all-reduce over sockets only.
        sockets->barrier();
        const auto q0 = Clock::now();
        sockets->all_reduce(t);
        sockets->barrier();
        const double qt = std::chrono::duration<double>(Clock::now() - q0).count();
        if (rep > 0) {
          stream_s.push_back(st);
          reduce_s.push_back(rt);
          socket_s.push_back(qt);
        }
      }
      if (rank == 0) {
        const double b = static_cast<double>(bytes);
        auto busbw = [&](double s) { return b / s / 1e9 * 2.0 * (n - 1) / n; };
        const double st = median(stream_s), stream = b / st / 1e9;
        const double rt = median(reduce_s), qt = median(socket_s);
        std::printf("%4d MiB | %5.2f (%5.2f-%5.2f) | %8.2f (%8.2f-%8.2f) %6.2f %5.2fx | %8.2f (%8.2f-%8.2f) %6.2f %5.2fx\n",
                    mib, stream, b / highest(stream_s) / 1e9, b / lowest(stream_s) / 1e9, rt * 1e3,
                    lowest(reduce_s) * 1e3, highest(reduce_s) * 1e3, busbw(rt), busbw(rt) / stream, qt * 1e3,
                    lowest(socket_s) * 1e3, highest(socket_s) * 1e3, busbw(qt), busbw(qt) / stream);
        std::fprintf(csv, "%d,%zu,%.4f,%.4f,%.4f,%.6f,%.4f,%.4f,%.6f,%.6f,%.6f,%.4f,%.4f,%.6f,%.6f\n", n, bytes, stream,
                     b / highest(stream_s) / 1e9, b / lowest(stream_s) / 1e9, rt, busbw(rt), busbw(rt) / stream,
                     lowest(reduce_s), highest(reduce_s), qt, busbw(qt), busbw(qt) / stream, lowest(socket_s),
                     highest(socket_s));
        std::fflush(stdout);
      }
    }
    if (csv) std::fclose(csv);
    if (sfd >= 0) ::close(sfd);
    sockets->barrier();
    sockets.reset();
    world.barrier();
  } catch (const std::exception& e) {
    die(e.what());
  }
  return 0;
}
