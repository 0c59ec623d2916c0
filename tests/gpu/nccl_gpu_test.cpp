// The NCCL communicator on every visible GPU (one thread per rank) against the in-process backend on the
// same values: integer sums exactly; f32 sums within rounding (NCCL's reduction order is not rank order,
// docs/gpu.md), and identical bits on every rank; gathers, scatters and all-to-all exactly.
#include <cmath>
#include <cstring>
#include <thread>

#include "exec/comm/inproc.h"
#include "backends/cuda/nccl_comm.h"
#include "gpu_util.h"

using namespace braid;
using namespace braid::exec;

namespace {

Tensor host_values(const TensorDesc& d, int rank) {
  Tensor t = Tensor::empty(d);
  for (int64_t i = 0; i < t.numel(); ++i) {
    double v = std::sin(0.37 * static_cast<double>(i) + rank) * (rank + 1);
    if (d.dtype == DType::i64) t.data<int64_t>()[i] = static_cast<int64_t>(i * 3 + rank);
    else set_from_double(t, i, v);
  }
  return t;
}

struct Results {
  std::vector<Tensor> reduce_f32, reduce_i64, gather, scatter, a2a, bcast;
};

// Runs the collectives of the test on `comm` (host tensors in, host tensors out) through `to_dev`/`to_host`.
template <typename Up, typename Down>
void run_rank(Communicator& comm, int n, Results& r, Up up, Down down) {
  int rank = comm.rank();
  Tensor f = up(host_values({Shape{4, 6}, DType::f32}, rank));
  comm.all_reduce(f);
  r.reduce_f32[static_cast<size_t>(rank)] = down(f);
  Tensor i = up(host_values({Shape{5}, DType::i64}, rank));
  comm.all_reduce(i);
  r.reduce_i64[static_cast<size_t>(rank)] = down(i);
  Tensor gin = up(host_values({Shape{2, 3}, DType::f32}, rank));
  Tensor gout = up(Tensor::empty({Shape{2, 3 * n}, DType::f32}));
  comm.all_gather(gin, gout, 1);
  r.gather[static_cast<size_t>(rank)] = down(gout);
  Tensor sin_ = up(host_values({Shape{2, 2 * n}, DType::f32}, rank));
  Tensor sout = up(Tensor::empty({Shape{2, 2}, DType::f32}));
  comm.reduce_scatter(sin_, sout, 1);
  r.scatter[static_cast<size_t>(rank)] = down(sout);
  Tensor ain = up(host_values({Shape{2 * n, 3}, DType::f32}, rank));
  Tensor aout = up(Tensor::empty({Shape{2, 3 * n}, DType::f32}));
  comm.all_to_all(ain, aout, 0, 1);
  r.a2a[static_cast<size_t>(rank)] = down(aout);
  Tensor b = up(host_values({Shape{7}, DType::f32}, rank));
  comm.broadcast(b, n - 1);
  r.bcast[static_cast<size_t>(rank)] = down(b);
  comm.barrier();
}

// Device memory of one rank for the test: host tensors up (uploaded, synchronised) and down (copied back).
struct RankMemory {
  explicit RankMemory(int device) : arena(device, size_t{64} << 20), stream(device) {}
  Tensor up(const Tensor& h) {
    Tensor t = Tensor::view(arena.take(h.bytes(), "nccl test"), h.desc());
    stream.upload(t.raw(), h.raw(), h.bytes());
    stream.synchronize();
    return t;
  }
  Tensor down(const Tensor& d) {
    Tensor h = Tensor::empty(d.desc());
    stream.download(h.raw(), d.raw(), d.bytes());
    return h;
  }
  cuda::DeviceArena arena;
  cuda::Stream stream;
};

void resize(Results& r, int n) {
  for (auto* v : {&r.reduce_f32, &r.reduce_i64, &r.gather, &r.scatter, &r.a2a, &r.bcast}) v->resize(static_cast<size_t>(n));
}

// The in-process backend's results on the same values: the reference.
void reference(int n, Results& ref) {
  InProcWorld world(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      auto comm = world.communicator(r);
      run_rank(*comm, n, ref, [](Tensor t) { return t; }, [](const Tensor& t) { return t.clone(); });
    });
  for (auto& t : threads) t.join();
}

}  // namespace

TEST(Nccl, CollectivesMatchInProcess) {
  BRAID_REQUIRE_GPU();
  const int n = cuda::device_count();
  std::vector<int> devices;
  for (int d = 0; d < n; ++d) devices.push_back(d);
  Results ref, got;
  resize(ref, n);
  resize(got, n);
  reference(n, ref);
  {
    NcclWorld world(devices);
    std::vector<std::unique_ptr<Communicator>> comms;
    for (int r = 0; r < n; ++r) comms.push_back(world.communicator(r));
    std::vector<std::thread> threads;
    std::vector<std::string> errors(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r)
      threads.emplace_back([&, r] {
        try {
          cuda::set_device(r);
          RankMemory mem(r);
          run_rank(*comms[static_cast<size_t>(r)], n, got, [&](const Tensor& h) { return mem.up(h); },
                   [&](const Tensor& d) { return mem.down(d); });
        } catch (const std::exception& e) {
          errors[static_cast<size_t>(r)] = e.what();
        }
      });
    for (auto& t : threads) t.join();
    for (int r = 0; r < n; ++r) ASSERT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
  }
  for (int r = 0; r < n; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    auto near = [](const Tensor& a, const Tensor& b, double tol) {
      ASSERT_EQ(a.desc(), b.desc());
      for (int64_t i = 0; i < a.numel(); ++i) EXPECT_NEAR(get_as_double(a, i), get_as_double(b, i), tol) << i;
    };
    near(got.reduce_f32[static_cast<size_t>(r)], ref.reduce_f32[static_cast<size_t>(r)], 1e-5);
    for (int64_t i = 0; i < 5; ++i)
      EXPECT_EQ(got.reduce_i64[static_cast<size_t>(r)].data<int64_t>()[i], ref.reduce_i64[static_cast<size_t>(r)].data<int64_t>()[i]);
    near(got.gather[static_cast<size_t>(r)], ref.gather[static_cast<size_t>(r)], 0);
    near(got.scatter[static_cast<size_t>(r)], ref.scatter[static_cast<size_t>(r)], 1e-5);
    near(got.a2a[static_cast<size_t>(r)], ref.a2a[static_cast<size_t>(r)], 0);
    near(got.bcast[static_cast<size_t>(r)], ref.bcast[static_cast<size_t>(r)], 0);
    // NCCL all-reduce: identical bits on every rank.
    EXPECT_EQ(std::memcmp(got.reduce_f32[static_cast<size_t>(r)].raw(), got.reduce_f32[0].raw(), got.reduce_f32[0].bytes()), 0);
  }
}

// Several processes (NcclWorld::join): each thread stands for a process, its host world an in-process one (in a
// job, the TCP world of braid launch), one GPU each. The unique id travels over the host world; the collectives
// then match the in-process reference as above, and a split of the whole world (its id shared over the host
// world's split) all-reduces again. On a machine with one GPU this is a world of one.
TEST(Nccl, JoinOverAHostWorld) {
  BRAID_REQUIRE_GPU();
  const int n = cuda::device_count();
  Results ref, got;
  resize(ref, n);
  resize(got, n);
  std::vector<double> split_sum(static_cast<size_t>(n), 0.0);
  reference(n, ref);
  InProcWorld hosts(n);
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        auto host = hosts.communicator(r);
        auto world = NcclWorld::join(*host, r);
        auto comm = world->communicator(r);
        cuda::set_device(r);
        RankMemory mem(r);
        run_rank(*comm, n, got, [&](const Tensor& h) { return mem.up(h); }, [&](const Tensor& d) { return mem.down(d); });
        std::vector<int> all;
        for (int k = 0; k < n; ++k) all.push_back(k);
        auto sub = comm->split(all);
        Tensor h = Tensor::empty({Shape{1}, DType::f64});
        h.data<double>()[0] = r + 1;
        Tensor one = mem.up(h);
        sub->all_reduce(one);
        split_sum[static_cast<size_t>(r)] = get_as_double(mem.down(one), 0);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
    EXPECT_NEAR(get_as_double(got.reduce_f32[static_cast<size_t>(r)], 3), get_as_double(ref.reduce_f32[static_cast<size_t>(r)], 3), 1e-5);
    for (int64_t i = 0; i < 5; ++i)
      EXPECT_EQ(got.reduce_i64[static_cast<size_t>(r)].data<int64_t>()[i], ref.reduce_i64[static_cast<size_t>(r)].data<int64_t>()[i]);
    EXPECT_EQ(split_sum[static_cast<size_t>(r)], n * (n + 1) / 2.0);
  }
}
