// A worker process for the distributed tests, started by tests/distributed/*_test.cpp (or under braid launch) with
// torchrun-style variables: `dist_worker SCENARIO`. Scenarios:
//   collectives  every collective and send/recv over the TCP world, each compared bit for bit with the
//                in-process backend run (in threads, here) on the same inputs; prints "ok N cases"
//   mismatch     rank 0 all-reduces f32[4], the others f32[5]: every rank must raise the same error, then
//                the group must still work
//   victim       all ranks barrier; the last rank then sleeps; the others mark braid/test/waiting/<r> in the
//                store and all-reduce, which must fail naming the last rank once it is killed or stopped
//   threads      two threads per rank, each splitting its own group (the whole world; pairs) at the same time
//                and all-reducing on it: concurrent splits and communicators of one rank on different threads
//   abort        rank 0 aborts (BRAID_TEST_ABORT=call) or receives a message of the wrong shape (=recv) while the
//                others wait in an all-reduce; everyone must fail with the reason
//   loop         all-reduces 256 KiB tensors until it fails (marks braid/test/looping/<r> after the first)
//   ringfull     rank 0 sends rank 1 a small message (filling its mailbox of 1), marks braid/test/waiting/0, then a
//                64 MiB one, which blocks once the shared-memory ring (or socket) is full: rank 1 has paused reading
//                it and only marks braid/test/waiting/1 and sleeps, to be killed or stopped by the test
//   echo         prints two lines to stdout and one to stderr, then exits with $BRAID_TEST_EXIT_CODE on rank
//                $BRAID_TEST_EXIT_RANK (0 elsewhere)
//   sleep        joins the job (heartbeats running) and sleeps
// After joining, each rank prints "rank R: transport shm send peers A recv peers B direct C" (tcp_comm_stats),
// and collectives ends with "rank R: shm bytes X direct D socket bytes Y". BRAID_TEST_RING_BYTES sets the ring
// size.
// Exit status: 0 ok, 1 a check failed, 2 a UserError, 3 an InternalError, 4 a CommError (a peer lost, a timeout,
// an aborted world); the error's message on stderr (stdout in abort).
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>

#include "distributed/rendezvous.h"
#include "exec/comm/inproc.h"

using namespace braid;
using namespace braid::dist;
using exec::Communicator;
using exec::ReduceOp;

namespace {

int env_int(const char* name, int fallback) {
  const char* s = std::getenv(name);
  return s && *s ? std::atoi(s) : fallback;
}

// Rank-dependent values of mixed magnitude (so a different summation order changes float results).
Tensor input(DType t, const Shape& s, int rank, int salt) {
  Tensor x = Tensor::empty({s, t});
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t k = ((rank + 1) * 131 + i * 17 + salt * 7) % 23 - 11;
    const double mag = std::pow(10.0, static_cast<double>((i + rank) % 5) - 2.0) / 3.0;
    switch (t) {
      case DType::f32: x.data<float>()[i] = static_cast<float>(static_cast<double>(k) * mag); break;
      case DType::f64: x.data<double>()[i] = static_cast<double>(k) * mag; break;
      case DType::i32: x.data<int32_t>()[i] = static_cast<int32_t>(k * 1000003 + rank); break;
      case DType::i64: x.data<int64_t>()[i] = k * 1000000007LL + rank; break;
      default: static_cast<uint16_t*>(x.raw())[i] = static_cast<uint16_t>(k * 977 + rank);
    }
  }
  return x;
}

using CaseFn = std::function<std::vector<Tensor>(Communicator&)>;

// Runs fn on the in-process backend with one thread per rank; returns rank `me`'s results.
std::vector<Tensor> inproc_results(int n, int me, const CaseFn& fn) {
  exec::InProcWorld world(n, {std::chrono::milliseconds(60'000), 1});
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < n; ++r) comms.push_back(world.communicator(r));
  std::vector<std::vector<Tensor>> res(static_cast<size_t>(n));
  std::vector<std::string> err(static_cast<size_t>(n));
  std::vector<std::thread> th;
  for (int r = 0; r < n; ++r)
    th.emplace_back([&, r] {
      try {
        res[r] = fn(*comms[r]);
      } catch (const std::exception& e) {
        err[r] = e.what();
        comms[r]->abort("failed");
      }
    });
  for (auto& t : th) t.join();
  for (int r = 0; r < n; ++r)
    if (!err[r].empty()) throw std::runtime_error(BRAID_STR("in-process reference, rank ", r, ": ", err[r]));
  return res[static_cast<size_t>(me)];
}

int run_collectives(Communicator& world) {
  const int n = world.size(), me = world.rank();
  std::vector<std::pair<std::string, CaseFn>> cases;
  const DType reducible[] = {DType::f32, DType::f64, DType::i32, DType::i64};
  const ReduceOp ops[] = {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max, ReduceOp::Avg};
  int salt = 0;
  auto add_all_reduce = [&](DType t, ReduceOp op, const Shape& s) {
    ++salt;
    cases.emplace_back(BRAID_STR("all_reduce ", dtype_name(t), s.str(), " ", exec::reduce_op_name(op)),
                       [=, salt = salt](Communicator& c) {
                         Tensor x = input(t, s, c.rank(), salt);
                         c.all_reduce(x, op);
                         return std::vector<Tensor>{x};
                       });
  };
  // Large tensors take the TCP backend's pipelined path (1 MiB segments, the last one partial) once every
  // chunk has 2 segments: (2^21 + 7) elements do for up to 4 ranks; (2^20 + 3) f32 is pipelined for 2 ranks
  // and takes the short path for 3 and 4, just under the threshold.
  for (DType t : {DType::f32, DType::f64})
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg})
      for (const Shape& s : {Shape{(1 << 20) + 3}, Shape{(1 << 21) + 7}}) add_all_reduce(t, op, s);
  for (DType t : reducible)
    for (ReduceOp op : ops) {
      if (op == ReduceOp::Avg && !is_float(t)) continue;
      for (const Shape& s : {Shape{7}, Shape{3, 5, 4}, Shape{1}, Shape{(1 << 14) + 3}}) add_all_reduce(t, op, s);
    }
  for (DType t : {DType::f32, DType::bf16, DType::i64})
    for (int axis : {0, 1, 2, -1}) {
      ++salt;
      cases.emplace_back(BRAID_STR("all_gather ", dtype_name(t), " axis ", axis), [=](Communicator& c) {
        const Shape s{2, 3, 4};
        Tensor x = input(t, s, c.rank(), salt);
        Tensor out = Tensor::empty(exec::all_gather_desc(x.desc(), axis, c.size()));
        c.all_gather(x, out, axis);
        return std::vector<Tensor>{out};
      });
    }
  for (DType t : {DType::f32, DType::f64, DType::i32})
    for (int axis : {0, 2, -1})
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Avg}) {
        if (op == ReduceOp::Avg && !is_float(t)) continue;
        ++salt;
        cases.emplace_back(BRAID_STR("reduce_scatter ", dtype_name(t), " axis ", axis, " ", exec::reduce_op_name(op)),
                           [=](Communicator& c) {
                             const Shape s{2 * c.size(), 3, c.size()};
                             Tensor x = input(t, s, c.rank(), salt);
                             Tensor out = Tensor::empty(exec::reduce_scatter_desc(x.desc(), axis, c.size()));
                             c.reduce_scatter(x, out, axis, op);
                             return std::vector<Tensor>{out};
                           });
      }
  for (int a = 0; a < 3; ++a)
    for (int cc = 0; cc < 3; ++cc) {
      ++salt;
      cases.emplace_back(BRAID_STR("all_to_all split ", a, " concat ", cc), [=](Communicator& c) {
        const Shape s{2 * c.size(), c.size(), 3 * c.size()};
        Tensor x = input(DType::f32, s, c.rank(), salt);
        Tensor out = Tensor::empty(exec::all_to_all_desc(x.desc(), a, cc, c.size()));
        c.all_to_all(x, out, a, cc);
        return std::vector<Tensor>{out};
      });
    }
  for (int root = 0; root < n; ++root)
    for (DType t : {DType::f32, DType::bf16}) {
      ++salt;
      cases.emplace_back(BRAID_STR("broadcast root ", root, " ", dtype_name(t)), [=](Communicator& c) {
        Tensor x = input(t, Shape{5, 3}, c.rank(), salt);
        c.broadcast(x, root);
        c.barrier();
        return std::vector<Tensor>{x};
      });
    }
  ++salt;
  cases.emplace_back("send/recv", [=](Communicator& c) {
    const int r = c.rank(), m = c.size(), next = (r + 1) % m, prev = (r + m - 1) % m;
    std::vector<Tensor> got;
    for (int round = 0; round < 3; ++round) {
      c.send(input(DType::f32, Shape{4, 3}, r, salt + round), next, 1);
      c.send(input(DType::i64, Shape{2}, r, salt + round), prev, 2);
      Tensor a = Tensor::empty({Shape{4, 3}, DType::f32}), b = Tensor::empty({Shape{2}, DType::i64});
      c.recv(a, prev, 1);
      c.recv(b, next, 2);
      got.push_back(a);
      got.push_back(b);
    }
    // Large messages, through the shared-memory ring on one host (bigger than it when the ring is small).
    c.send(input(DType::f32, Shape{(1 << 20) + 5}, r, salt), next, 3);
    Tensor big = Tensor::empty({Shape{(1 << 20) + 5}, DType::f32});
    c.recv(big, prev, 3);
    got.push_back(big);
    c.send(input(DType::f64, Shape{3}, r, salt), r, 5);  // to itself
    Tensor self = Tensor::empty({Shape{3}, DType::f64});
    c.recv(self, r, 5);
    got.push_back(self);
    return got;
  });
  ++salt;
  cases.emplace_back("split", [=](Communicator& c) {
    const int m = c.size();
    std::vector<int> evens, odds, reversed;
    for (int r = 0; r < m; ++r) (r % 2 ? odds : evens).insert((r % 2 ? odds : evens).begin(), r);
    for (int r = m - 1; r >= 0; --r) reversed.push_back(r);
    auto mine = c.split(c.rank() % 2 ? odds : evens);
    auto rev = c.split(reversed);
    Tensor x = input(DType::f32, Shape{9}, c.rank(), salt);
    Tensor y = input(DType::f64, Shape{6}, c.rank(), salt + 1);
    mine->all_reduce(x);
    rev->all_reduce(y);  // folded in the reversed order
    Tensor g = Tensor::empty({Shape{3 * m}, DType::f32});
    rev->all_gather(input(DType::f32, Shape{3}, c.rank(), salt), g, 0);
    return std::vector<Tensor>{x, y, g, Tensor::empty({Shape{1}, DType::i32})};
  });

  int bad = 0;
  for (const auto& [name, fn] : cases) {
    const std::vector<Tensor> tcp = fn(world);
    const std::vector<Tensor> ref = inproc_results(n, me, fn);
    for (size_t k = 0; k < tcp.size(); ++k) {
      if (tcp[k].desc() != ref[k].desc() || std::memcmp(tcp[k].raw(), ref[k].raw(), tcp[k].bytes()) != 0) {
        std::fprintf(stderr, "rank %d: %s: result %zu differs from the in-process backend\n", me, name.c_str(), k);
        ++bad;
      }
    }
  }
  if (bad) return 1;
  const TcpCommStats st = tcp_comm_stats(world);
  std::printf("rank %d: shm bytes %llu direct %llu socket bytes %llu\n", me,
              static_cast<unsigned long long>(st.shm_bytes_sent), static_cast<unsigned long long>(st.direct_bytes_sent),
              static_cast<unsigned long long>(st.socket_bytes_sent));
  std::printf("rank %d: ok %zu cases\n", me, cases.size());
  return 0;
}

int run_mismatch(Communicator& world) {
  Tensor x = Tensor::empty({Shape{world.rank() == 0 ? 4 : 5}, DType::f32});
  try {
    world.all_reduce(x);
    std::fprintf(stderr, "rank %d: a mismatched all_reduce passed\n", world.rank());
    return 1;
  } catch (const InternalError& e) {
    std::printf("rank %d: error: %s\n", world.rank(), e.what());
  }
  Tensor big = Tensor::empty({Shape{(1 << 20) + (world.rank() == 0 ? 0 : 4)}, DType::f32});  // pipelined
  try {
    world.all_reduce(big);
    std::fprintf(stderr, "rank %d: a mismatched large all_reduce passed\n", world.rank());
    return 1;
  } catch (const InternalError& e) {
    std::printf("rank %d: error: %s\n", world.rank(), e.what());
  }
  Tensor bad_axis = Tensor::empty({Shape{3}, DType::f32});
  Tensor out = Tensor::empty({Shape{3 * world.size()}, DType::f32});
  try {
    world.all_gather(bad_axis, out, world.rank() == 1 ? 5 : 0);  // rank 1's axis is out of range
    std::fprintf(stderr, "rank %d: a bad all_gather passed\n", world.rank());
    return 1;
  } catch (const InternalError& e) {
    std::printf("rank %d: error: %s\n", world.rank(), e.what());
  }
  Tensor y = input(DType::f32, Shape{3}, world.rank(), 1);
  world.all_reduce(y);  // the group still works
  std::printf("rank %d: recovered\n", world.rank());
  return 0;
}

int run_victim(Communicator& world, StoreClient& store) {
  world.barrier();
  const int victim = world.size() - 1;
  if (world.rank() == victim) {
    std::printf("rank %d: sleeping\n", world.rank());
    std::fflush(stdout);
    for (;;) ::pause();
  }
  store.set(BRAID_STR("braid/test/waiting/", world.rank()), "1");
  Tensor x = input(DType::f32, Shape{1000}, world.rank(), 1);
  world.all_reduce(x);
  std::fprintf(stderr, "rank %d: all_reduce returned without rank %d\n", world.rank(), victim);
  return 1;
}

int run_threads(Communicator& world) {
  const int n = world.size(), r = world.rank();
  std::vector<int> all, pair;
  for (int k = 0; k < n; ++k) all.push_back(k);
  pair = {r - r % 2, r - r % 2 + 1};
  std::vector<std::string> errors(2);
  auto work = [&](int which) {
    try {
      auto c = world.split(which == 0 ? all : pair);
      for (int it = 0; it < 20; ++it) {
        Tensor x = Tensor::empty({Shape{1000}, DType::i64});
        for (int64_t i = 0; i < 1000; ++i) x.data<int64_t>()[i] = i * (c->rank() + 1) + it;
        c->all_reduce(x);
        const int64_t m = c->size();
        for (int64_t i = 0; i < 1000; ++i)
          if (x.data<int64_t>()[i] != i * m * (m + 1) / 2 + m * it)
            throw std::runtime_error(BRAID_STR("thread ", which, " iteration ", it, ": wrong sum at ", i));
      }
    } catch (const std::exception& e) {
      errors[static_cast<size_t>(which)] = e.what();
    }
  };
  std::thread a(work, 0), b(work, 1);
  a.join();
  b.join();
  for (const auto& e : errors)
    if (!e.empty()) {
      std::fprintf(stderr, "rank %d: %s\n", r, e.c_str());
      return 1;
    }
  std::printf("rank %d: threads ok\n", r);
  return 0;
}

int run_abort(Communicator& world) {
  world.barrier();
  const bool by_recv = std::getenv("BRAID_TEST_ABORT") && std::string(std::getenv("BRAID_TEST_ABORT")) == "recv";
  try {
    if (world.rank() == 0) {
      if (!by_recv) {
        world.abort("stopping for a test");
        Tensor x = Tensor::empty({Shape{4}, DType::f32});
        world.all_reduce(x);  // must fail at once: the world is aborted
      } else {
        Tensor wrong = Tensor::empty({Shape{4}, DType::f32});
        world.recv(wrong, 1, 9);
      }
    } else {
      if (by_recv && world.rank() == 1) world.send(Tensor::empty({Shape{3}, DType::f32}), 0, 9);
      Tensor x = Tensor::empty({Shape{4}, DType::f32});
      world.all_reduce(x);
    }
  } catch (const InternalError& e) {
    std::printf("rank %d: error: %s\n", world.rank(), e.what());
    return 3;
  } catch (const CommError& e) {
    std::printf("rank %d: error: %s\n", world.rank(), e.what());
    return 4;
  }
  return 1;
}

int run_ringfull(Communicator& world, StoreClient& store) {
  world.barrier();
  if (world.rank() == 1) {
    store.set("braid/test/waiting/1", "1");
    for (;;) ::pause();
  }
  if (world.rank() != 0) {
    for (;;) ::pause();
  }
  world.send(input(DType::f32, Shape{4}, 0, 1), 1, 7);  // fills rank 1's mailbox for tag 7: it stops reading
  store.set("braid/test/waiting/0", "1");
  world.send(input(DType::f32, Shape{16 << 20}, 0, 2), 1, 7);  // more than any socket buffers hold
  std::fprintf(stderr, "rank 0: a 64 MiB send to a rank that does not read returned\n");
  return 1;
}

int run_loop(Communicator& world, StoreClient& store) {
  Tensor x = input(DType::f32, Shape{64 * 1024}, world.rank(), 3);
  for (int64_t i = 0;; ++i) {
    world.all_reduce(x, ReduceOp::Max);
    if (i == 0) store.set(BRAID_STR("braid/test/looping/", world.rank()), "1");
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: dist_worker collectives|mismatch|victim|echo|sleep\n");
    return 2;
  }
  const std::string scenario = argv[1];
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    const DistEnv env = detect_env();
    if (scenario == "echo") {
      std::printf("hello from rank %d of %d\nsecond line\n", env.rank, env.world_size);
      std::fprintf(stderr, "a line on stderr\n");
      std::fflush(nullptr);
      return env.rank == env_int("BRAID_TEST_EXIT_RANK", -1) ? env_int("BRAID_TEST_EXIT_CODE", 0) : 0;
    }
    JobOptions opt;
    opt.comm.timeout = std::chrono::milliseconds(env_int("BRAID_TEST_TIMEOUT_MS", 60'000));
    opt.comm.connect_timeout = std::chrono::milliseconds(60'000);
    opt.comm.key_prefix = BRAID_STR("braid/comm/", scenario);
    if (const int ring = env_int("BRAID_TEST_RING_BYTES", 0); ring > 0) opt.comm.shm_ring_bytes = static_cast<uint64_t>(ring);
    Job job = join_job(env, opt);
    if (job.world->size() > 1) {
      const TcpCommStats st = tcp_comm_stats(*job.world);
      std::printf("rank %d: transport shm send peers %d recv peers %d direct %d\n", env.rank, st.shm_send_peers,
                  st.shm_recv_peers, st.direct_send_peers);
    }
    if (scenario == "collectives") return run_collectives(*job.world);
    if (scenario == "mismatch") return run_mismatch(*job.world);
    if (scenario == "victim") return run_victim(*job.world, *job.store);
    if (scenario == "loop") return run_loop(*job.world, *job.store);
    if (scenario == "threads") return run_threads(*job.world);
    if (scenario == "abort") return run_abort(*job.world);
    if (scenario == "ringfull") return run_ringfull(*job.world, *job.store);
    if (scenario == "sleep") {
      std::printf("rank %d: sleeping pid %d\n", env.rank, static_cast<int>(::getpid()));
      for (;;) ::pause();
    }
    std::fprintf(stderr, "unknown scenario '%s'\n", scenario.c_str());
    return 2;
  } catch (const UserError& e) {
    std::fprintf(stderr, "%s\n", e.format().c_str());
    return 2;
  } catch (const InternalError& e) {
    std::fprintf(stderr, "braid: %s\n", e.what());
    return 3;
  } catch (const CommError& e) {
    std::fprintf(stderr, "braid: %s\n", e.what());
    return 4;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "braid: error: %s\n", e.what());
    return 1;
  }
}
