// The in-process communication backend against serial references: every collective for 1 to 4 ranks, in
// several dtypes and along every axis, compared bit for bit (reductions fold in rank order, so the reference
// is a plain loop); sub-groups used concurrently; send/recv order and capacity; and the failure paths
// (mismatched collectives, timeouts, abort) ending in errors that name the ranks instead of hangs.
#include <gtest/gtest.h>

#include <atomic>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <thread>

#include "exec/comm/inproc.h"

using namespace braid;
using namespace braid::exec;
using namespace std::chrono_literals;

namespace {

// Runs fn on one thread per rank of `world`; returns each rank's error message ("" when it returned).
// A rank that throws aborts the world, so a broken test fails fast instead of waiting for timeouts.
std::vector<std::string> run_ranks(InProcWorld& world, const std::function<void(Communicator&)>& fn) {
  const int n = world.size();
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < n; ++r) comms.push_back(world.communicator(r));
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(*comms[r]);
      } catch (const std::exception& e) {
        errors[r] = e.what();
        comms[r]->abort(BRAID_STR("rank ", r, " threw"));
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

std::vector<std::string> run_ranks(int n, const std::function<void(Communicator&)>& fn, InProcOptions opt = {}) {
  if (opt.timeout == InProcOptions{}.timeout) opt.timeout = 30s;  // tests never wait minutes
  InProcWorld world(n, opt);
  return run_ranks(world, fn);
}

void expect_no_errors(const std::vector<std::string>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

template <typename F>
void with_type(DType t, F&& f) {
  switch (t) {
    case DType::f32: return f(float{});
    case DType::f64: return f(double{});
    case DType::i32: return f(int32_t{});
    case DType::i64: return f(int64_t{});
    default: FAIL() << "no arithmetic type for " << dtype_name(t);
  }
}

// Rank-dependent values of mixed magnitude, so that a different summation order changes float results.
Tensor input(DType t, const Shape& s, int rank, int salt) {
  Tensor x = Tensor::empty({s, t});
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t k = ((rank + 1) * 131 + i * 17 + salt * 7) % 23 - 11;
    if (t == DType::f16 || t == DType::bf16) {
      static_cast<uint16_t*>(x.raw())[i] = static_cast<uint16_t>(k * 977 + rank);
      continue;
    }
    with_type(t, [&](auto z) {
      using T = decltype(z);
      T v = static_cast<T>(k);
      if constexpr (std::is_floating_point_v<T>) v = v * static_cast<T>(std::pow(10.0, (i + rank) % 5 - 2) / 3.0);
      x.data<T>()[i] = v;
    });
  }
  return x;
}

// The serial reference: element-wise fold over ranks 0..n-1 in that order, in the tensor's dtype.
Tensor reference_reduce(DType t, const Shape& s, ReduceOp op, int n, int salt) {
  Tensor acc = input(t, s, 0, salt);
  with_type(t, [&](auto z) {
    using T = decltype(z);
    T* a = acc.data<T>();
    for (int r = 1; r < n; ++r) {
      Tensor x = input(t, s, r, salt);
      for (int64_t i = 0; i < acc.numel(); ++i) {
        const T b = x.data<T>()[i];
        switch (op) {
          case ReduceOp::Sum: case ReduceOp::Avg: a[i] = a[i] + b; break;
          case ReduceOp::Prod: a[i] = a[i] * b; break;
          case ReduceOp::Min: a[i] = std::min(a[i], b); break;
          case ReduceOp::Max: a[i] = std::max(a[i], b); break;
        }
      }
    }
    if (op == ReduceOp::Avg)
      for (int64_t i = 0; i < acc.numel(); ++i) a[i] = a[i] / static_cast<T>(n);
  });
  return acc;
}

std::vector<int64_t> unravel(int64_t flat, const Shape& s) {
  std::vector<int64_t> idx(static_cast<size_t>(s.rank()));
  for (int d = s.rank() - 1; d >= 0; --d) {
    idx[d] = flat % s[d];
    flat /= s[d];
  }
  return idx;
}
int64_t ravel(const std::vector<int64_t>& idx, const Shape& s) {
  int64_t flat = 0;
  for (int d = 0; d < s.rank(); ++d) flat = flat * s[d] + idx[d];
  return flat;
}
void copy_elem(const Tensor& dst, int64_t di, const Tensor& src, int64_t si) {
  const size_t es = dtype_size(dst.dtype());
  std::memcpy(static_cast<char*>(dst.raw()) + di * es, static_cast<const char*>(src.raw()) + si * es, es);
}

// Out element by element: where in which rank's input each output index comes from.
Tensor reference_all_gather(DType t, const Shape& in, int axis, int n, int salt) {
  const int a = in.norm_axis(axis);
  Shape os = in;
  os[a] *= n;
  Tensor out = Tensor::empty({os, t});
  for (int64_t i = 0; i < out.numel(); ++i) {
    auto idx = unravel(i, os);
    const int j = static_cast<int>(idx[a] / in[a]);
    idx[a] %= in[a];
    copy_elem(out, i, input(t, in, j, salt), ravel(idx, in));
  }
  return out;
}

Tensor reference_reduce_scatter(DType t, const Shape& in, int axis, ReduceOp op, int n, int rank, int salt) {
  const int a = in.norm_axis(axis);
  Tensor full = reference_reduce(t, in, op, n, salt);
  Shape os = in;
  os[a] /= n;
  Tensor out = Tensor::empty({os, t});
  for (int64_t i = 0; i < out.numel(); ++i) {
    auto idx = unravel(i, os);
    idx[a] += rank * os[a];
    copy_elem(out, i, full, ravel(idx, in));
  }
  return out;
}

Tensor reference_all_to_all(DType t, const Shape& in, int split, int concat, int n, int rank, int salt) {
  const int a = in.norm_axis(split), c = in.norm_axis(concat);
  Shape chunk = in;
  chunk[a] /= n;
  Shape os = chunk;
  os[c] *= n;
  Tensor out = Tensor::empty({os, t});
  for (int64_t i = 0; i < out.numel(); ++i) {
    auto idx = unravel(i, os);
    const int j = static_cast<int>(idx[c] / chunk[c]);
    idx[c] %= chunk[c];
    idx[a] += rank * chunk[a];
    copy_elem(out, i, input(t, in, j, salt), ravel(idx, in));
  }
  return out;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.desc() == b.desc() && (a.bytes() == 0 || std::memcmp(a.raw(), b.raw(), a.bytes()) == 0);
}

const std::vector<DType> kArith = {DType::f32, DType::f64, DType::i32, DType::i64};
const std::vector<DType> kAll = {DType::f32, DType::f64, DType::i32, DType::i64, DType::bf16};

// Per-rank results of a run: results[rank][k] is the k-th tensor that rank produced.
using Results = std::vector<std::vector<Tensor>>;

}  // namespace

TEST(CommCollectives, AllReduceMatchesSerialFoldBitForBit) {
  const std::vector<Shape> shapes = {Shape{7}, Shape{3, 5}, Shape{}, Shape{0}};
  const std::vector<ReduceOp> ops = {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max, ReduceOp::Avg};
  for (int n = 1; n <= 4; ++n)
    for (DType t : kArith) {
      Results res(n);
      expect_no_errors(run_ranks(n, [&](Communicator& c) {
        for (const Shape& s : shapes)
          for (ReduceOp op : ops) {
            if (op == ReduceOp::Avg && !is_float(t)) continue;
            Tensor x = input(t, s, c.rank(), 3);
            c.all_reduce(x, op);
            res[c.rank()].push_back(x);
          }
      }));
      size_t k = 0;
      for (const Shape& s : shapes)
        for (ReduceOp op : ops) {
          if (op == ReduceOp::Avg && !is_float(t)) continue;
          const Tensor want = reference_reduce(t, s, op, n, 3);
          for (int r = 0; r < n; ++r)
            EXPECT_TRUE(same_bits(res[r][k], want))
                << "n=" << n << " " << dtype_name(t) << s.str() << " " << reduce_op_name(op) << " rank " << r;
          ++k;
        }
    }
}

TEST(CommCollectives, AllReduceSumsInRankOrder) {
  // In f32, (1e8 + 1) rounds to 1e8: rank order gives ((1e8 + 1) - 1e8) + 1 = 1; any other grouping
  // that adds the two 1s together first or cancels the 1e8s first gives 2.
  const float v[] = {1e8f, 1.f, -1e8f, 1.f};
  std::vector<float> got(4);
  expect_no_errors(run_ranks(4, [&](Communicator& c) {
    Tensor x = Tensor::empty({Shape{1}, DType::f32});
    x.data<float>()[0] = v[c.rank()];
    c.all_reduce(x);
    got[c.rank()] = x.data<float>()[0];
  }));
  for (float g : got) EXPECT_EQ(g, 1.f);
}

TEST(CommCollectives, AllGatherAlongEveryAxis) {
  const Shape in{2, 3, 2};
  const std::vector<int> axes = {0, 1, 2, -1};
  for (int n = 1; n <= 4; ++n)
    for (DType t : kAll) {
      Results res(n);
      expect_no_errors(run_ranks(n, [&](Communicator& c) {
        for (int axis : axes) {
          Tensor x = input(t, in, c.rank(), axis + 5);
          Tensor y = Tensor::empty(all_gather_desc(x.desc(), axis, n));
          c.all_gather(x, y, axis);
          res[c.rank()].push_back(y);
        }
      }));
      for (size_t k = 0; k < axes.size(); ++k) {
        const Tensor want = reference_all_gather(t, in, axes[k], n, axes[k] + 5);
        for (int r = 0; r < n; ++r)
          EXPECT_TRUE(same_bits(res[r][k], want))
              << "n=" << n << " " << dtype_name(t) << " axis " << axes[k] << " rank " << r;
      }
    }
}

TEST(CommCollectives, ReduceScatterAlongEveryAxisIsSliceOfAllReduce) {
  const std::vector<int> axes = {0, 1, 2, -1};
  const std::vector<ReduceOp> ops = {ReduceOp::Sum, ReduceOp::Max};
  for (int n = 1; n <= 4; ++n)
    for (DType t : kArith) {
      Results res(n);
      auto shape_for = [&](int axis) {
        Shape s{2, 3, 2};
        s[s.norm_axis(axis)] *= n;
        return s;
      };
      expect_no_errors(run_ranks(n, [&](Communicator& c) {
        for (int axis : axes)
          for (ReduceOp op : ops) {
            Tensor x = input(t, shape_for(axis), c.rank(), axis);
            Tensor y = Tensor::empty(reduce_scatter_desc(x.desc(), axis, n));
            c.reduce_scatter(x, y, axis, op);
            res[c.rank()].push_back(y);
            // reduce_scatter then all_gather is all_reduce, bit for bit.
            Tensor g = Tensor::empty(x.desc());
            c.all_gather(y, g, axis);
            c.all_reduce(x, op);
            EXPECT_TRUE(same_bits(g, x)) << "rank " << c.rank() << " axis " << axis;
          }
      }));
      size_t k = 0;
      for (int axis : axes)
        for (ReduceOp op : ops) {
          for (int r = 0; r < n; ++r)
            EXPECT_TRUE(same_bits(res[r][k],
                                  reference_reduce_scatter(t, shape_for(axis), axis, op, n, r, axis)))
                << "n=" << n << " " << dtype_name(t) << " axis " << axis << " rank " << r;
          ++k;
        }
    }
}

TEST(CommCollectives, AllToAllEveryAxisPair) {
  const std::vector<std::pair<int, int>> pairs = {{0, 0}, {0, 1}, {1, 0}, {0, 2}, {2, 0},
                                                  {1, 2}, {2, 1}, {2, 2}, {-1, 0}, {1, -1}};
  for (int n = 1; n <= 4; ++n)
    for (DType t : kAll) {
      Results res(n);
      auto shape_for = [&](int split) {
        Shape s{2, 3, 2};
        s[s.norm_axis(split)] *= n;
        return s;
      };
      expect_no_errors(run_ranks(n, [&](Communicator& c) {
        for (auto [a, b] : pairs) {
          Tensor x = input(t, shape_for(a), c.rank(), a * 3 + b);
          Tensor y = Tensor::empty(all_to_all_desc(x.desc(), a, b, n));
          c.all_to_all(x, y, a, b);
          res[c.rank()].push_back(y);
        }
      }));
      for (size_t k = 0; k < pairs.size(); ++k) {
        auto [a, b] = pairs[k];
        for (int r = 0; r < n; ++r)
          EXPECT_TRUE(same_bits(res[r][k], reference_all_to_all(t, shape_for(a), a, b, n, r, a * 3 + b)))
              << "n=" << n << " " << dtype_name(t) << " split " << a << " concat " << b << " rank " << r;
      }
    }
}

TEST(CommCollectives, BroadcastFromEveryRoot) {
  for (int n = 1; n <= 4; ++n)
    for (DType t : kAll) {
      Results res(n);
      expect_no_errors(run_ranks(n, [&](Communicator& c) {
        for (int root = 0; root < n; ++root) {
          Tensor x = input(t, Shape{4, 3}, c.rank(), root);
          c.broadcast(x, root);
          res[c.rank()].push_back(x);
        }
      }));
      for (int root = 0; root < n; ++root)
        for (int r = 0; r < n; ++r)
          EXPECT_TRUE(same_bits(res[r][root], input(t, Shape{4, 3}, root, root)))
              << "n=" << n << " root " << root << " rank " << r;
    }
}

// reduce: the root's tensor holds all_reduce's bits (every root, op, shape, dtype); the other ranks' are scratch.
TEST(CommCollectives, ReduceToEveryRootGivesAllReduceBits) {
  const std::vector<Shape> shapes = {Shape{7}, Shape{3, 5}, Shape{}, Shape{0}};
  const std::vector<ReduceOp> ops = {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Avg};
  for (int n = 1; n <= 4; ++n)
    for (DType t : kArith) {
      Results res(n);
      expect_no_errors(run_ranks(n, [&](Communicator& c) {
        for (int root = 0; root < n; ++root)
          for (const Shape& s : shapes)
            for (ReduceOp op : ops) {
              if (op == ReduceOp::Avg && !is_float(t)) continue;
              Tensor x = input(t, s, c.rank(), 3);
              c.reduce(x, root, op);
              res[c.rank()].push_back(x);
            }
      }));
      size_t k = 0;
      for (int root = 0; root < n; ++root)
        for (const Shape& s : shapes)
          for (ReduceOp op : ops) {
            if (op == ReduceOp::Avg && !is_float(t)) continue;
            EXPECT_TRUE(same_bits(res[static_cast<size_t>(root)][k], reference_reduce(t, s, op, n, 3)))
                << "n=" << n << " " << dtype_name(t) << s.str() << " " << reduce_op_name(op) << " root " << root;
            ++k;
          }
    }
  const auto errors = run_ranks(2, [&](Communicator& c) {
    Tensor x = Tensor::empty({Shape{2}, DType::f32});
    c.reduce(x, 2);
  });
  EXPECT_NE(errors[0].find("reduce: root 2 is not a rank of a group of 2"), std::string::npos) << errors[0];
}

TEST(CommCollectives, BarrierWaitsForEveryRank) {
  for (int n = 1; n <= 4; ++n) {
    std::atomic<int> before{0};
    std::vector<int> seen(n);
    expect_no_errors(run_ranks(n, [&](Communicator& c) {
      if (c.rank() == 0) std::this_thread::sleep_for(20ms);
      ++before;
      c.barrier();
      seen[c.rank()] = before.load();
    }));
    for (int s : seen) EXPECT_EQ(s, n);
  }
}

TEST(CommSplit, RowsAndColumnsOfATwoByTwoGridRunConcurrently) {
  // Ranks r = 2 * row + col. Row 0 reduces over its row, then its column; row 1 over its column first, so
  // row and column groups are busy at the same time and each group still sees one order of calls.
  std::vector<Tensor> out(4), gathered(4);
  std::vector<std::vector<int>> ranks(4);
  expect_no_errors(run_ranks(4, [&](Communicator& c) {
    const int r = c.rank(), row = r / 2, col = r % 2;
    auto rows = c.split({2 * row, 2 * row + 1});
    auto cols = c.split({col, col + 2});
    ranks[r] = {rows->rank(), rows->size(), cols->rank(), cols->size()};
    Tensor acc = Tensor::empty({Shape{5}, DType::f64});
    Tensor g = Tensor::empty({Shape{10}, DType::f64});
    for (int it = 0; it < 20; ++it) {
      Tensor x = input(DType::f64, Shape{5}, r, it);
      if (row == 0) {
        rows->all_reduce(x);
        cols->all_reduce(x);
      } else {
        cols->all_reduce(x);
        rows->all_reduce(x);
      }
      rows->all_gather(x, g, 0);
      for (int64_t i = 0; i < 5; ++i) acc.data<double>()[i] += x.data<double>()[i];
    }
    out[r] = acc;
    gathered[r] = g;
  }));
  for (int r = 0; r < 4; ++r) EXPECT_EQ(ranks[r], (std::vector<int>{r % 2, 2, r / 2, 2}));
  // a = x0 + x1 (row 0); column c: a + x_{2+c} (rank 0 first); row 1 then adds its two column results.
  std::vector<Tensor> want(4), last(4);
  for (auto& w : want) w = Tensor::empty({Shape{5}, DType::f64});
  for (auto& l : last) l = Tensor::empty({Shape{10}, DType::f64});
  for (int it = 0; it < 20; ++it) {
    Tensor x[4];
    for (int r = 0; r < 4; ++r) x[r] = input(DType::f64, Shape{5}, r, it);
    for (int64_t i = 0; i < 5; ++i) {
      auto v = [&](int r) { return x[r].data<double>()[i]; };
      const double a = v(0) + v(1), c0 = a + v(2), c1 = a + v(3), d = c0 + c1;
      const double res[4] = {c0, c1, d, d};
      for (int r = 0; r < 4; ++r) want[r].data<double>()[i] += res[r];
      if (it == 19)
        for (int r = 0; r < 4; ++r) {
          const int row0 = r / 2 * 2;
          last[r].data<double>()[i] = res[row0];
          last[r].data<double>()[5 + i] = res[row0 + 1];
        }
    }
  }
  for (int r = 0; r < 4; ++r) {
    EXPECT_TRUE(same_bits(out[r], want[r])) << "rank " << r;
    EXPECT_TRUE(same_bits(gathered[r], last[r])) << "rank " << r;
  }
}

TEST(CommSplit, GroupRanksFollowTheListOrderAndSplitsNest) {
  std::vector<std::vector<double>> got(4);
  expect_no_errors(run_ranks(4, [&](Communicator& c) {
    auto rev = c.split({3, 2, 1, 0});
    EXPECT_EQ(rev->rank(), 3 - c.rank());
    Tensor x = Tensor::empty({Shape{1}, DType::f32});
    const float v[] = {1.f, -1e8f, 1.f, 1e8f};  // in list order 3, 2, 1, 0: 1e8, 1, -1e8, 1 -> 1
    x.data<float>()[0] = v[c.rank()];
    rev->all_reduce(x);
    got[c.rank()].push_back(x.data<float>()[0]);
    // A split of a split names ranks of the parent: rev's ranks {0, 1} are world ranks 3 and 2.
    if (rev->rank() < 2) {
      auto pair = rev->split({1, 0});
      Tensor y = Tensor::empty({Shape{1}, DType::f32});
      y.data<float>()[0] = static_cast<float>(c.rank());
      pair->broadcast(y, 0);  // pair rank 0 is rev rank 1, world rank 2
      got[c.rank()].push_back(y.data<float>()[0]);
    }
    // Splitting the same ranks twice gives two independent groups; they may interleave.
    auto a = c.split({0, 1, 2, 3});
    auto b = c.split({0, 1, 2, 3});
    Tensor one = Tensor::empty({Shape{1}, DType::f32});
    one.data<float>()[0] = 1;
    a->all_reduce(one);
    b->barrier();
    got[c.rank()].push_back(one.data<float>()[0]);
  }));
  EXPECT_EQ(got[0], (std::vector<double>{1, 4}));
  EXPECT_EQ(got[1], (std::vector<double>{1, 4}));
  EXPECT_EQ(got[2], (std::vector<double>{1, 2, 4}));
  EXPECT_EQ(got[3], (std::vector<double>{1, 2, 4}));
}

TEST(CommSplit, MembersListingDifferentOrdersIsAnError) {
  auto errors = run_ranks(2, [&](Communicator& c) {
    c.split(c.rank() == 0 ? std::vector<int>{0, 1} : std::vector<int>{1, 0});
  });
  // Whoever comes second is told; the first cannot know yet.
  const std::string& e = errors[0].empty() ? errors[1] : errors[0];
  EXPECT_TRUE(errors[0].empty() != errors[1].empty()) << errors[0] << " | " << errors[1];
  EXPECT_TRUE(e.find("lists the group as [1, 0] but another member listed it as [0, 1]") != std::string::npos ||
              e.find("lists the group as [0, 1] but another member listed it as [1, 0]") != std::string::npos)
      << e;
  auto bad = run_ranks(2, [&](Communicator& c) {
    if (c.rank() == 0) c.split({1});
  });
  EXPECT_NE(bad[0].find("split [1]: called by rank 0, which is not in the list"), std::string::npos) << bad[0];
}

TEST(CommP2P, MessagesArriveInOrderPerTagAndTagsAreIndependent) {
  InProcOptions opt;
  opt.mailbox_capacity = 4;
  std::vector<int> got;
  expect_no_errors(run_ranks(2, [&](Communicator& c) {
    Tensor x = Tensor::empty({Shape{1}, DType::i32});
    if (c.rank() == 0) {
      for (int v : {11, 21, 12, 22}) {
        x.data<int32_t>()[0] = v;
        c.send(x, 1, v / 10);  // tag 1: 11, 12; tag 2: 21, 22
      }
    } else {
      for (int tag : {2, 2, 1, 1}) {
        c.recv(x, 0, tag);
        got.push_back(x.data<int32_t>()[0]);
      }
    }
  }, opt));
  EXPECT_EQ(got, (std::vector<int>{21, 22, 11, 12}));
}

TEST(CommP2P, RingShiftAndSelfSend) {
  for (int n = 1; n <= 4; ++n) {
    std::vector<std::vector<int64_t>> got(n);
    expect_no_errors(run_ranks(n, [&](Communicator& c) {
      const int r = c.rank(), next = (r + 1) % n, prev = (r + n - 1) % n;
      Tensor x = Tensor::empty({Shape{2, 2}, DType::i64});
      x.data<int64_t>()[3] = r;
      for (int step = 0; step < 10; ++step) {  // the value travels round the ring
        c.send(x, next, 0);
        c.recv(x, prev, 0);
      }
      got[r].push_back(x.data<int64_t>()[3]);
      c.send(x, r, 9);
      Tensor y = Tensor::empty(x.desc());
      c.recv(y, r, 9);
      got[r].push_back(y.data<int64_t>()[3]);
    }));
    for (int r = 0; r < n; ++r) {
      const int64_t want = ((r - 10) % n + n) % n;
      EXPECT_EQ(got[r], (std::vector<int64_t>{want, want})) << "n=" << n;
    }
  }
}

TEST(CommP2P, SendBlocksWhileTheMailboxIsFull) {
  InProcOptions opt;
  opt.mailbox_capacity = 2;
  std::atomic<int> sent{0};
  int seen_while_blocked = -1;
  std::vector<float> got;
  expect_no_errors(run_ranks(2, [&](Communicator& c) {
    Tensor x = Tensor::empty({Shape{3}, DType::f32});
    if (c.rank() == 0) {
      for (int i = 0; i < 3; ++i) {
        x.data<float>()[0] = static_cast<float>(i);
        c.send(x, 1, 0);  // x is reused at once: send buffered its bytes
        ++sent;
      }
      return;
    }
    for (int spins = 0; sent < 2 && spins < 10000; ++spins) std::this_thread::sleep_for(1ms);
    std::this_thread::sleep_for(50ms);
    seen_while_blocked = sent;  // the third send waits for room
    for (int i = 0; i < 3; ++i) {
      c.recv(x, 0, 0);
      got.push_back(x.data<float>()[0]);
    }
  }, opt));
  EXPECT_EQ(seen_while_blocked, 2);
  EXPECT_EQ(sent, 3);
  EXPECT_EQ(got, (std::vector<float>{0, 1, 2}));
}

TEST(CommErrors, MismatchedCollectivesNameTheRanksOnEveryRank) {
  InProcOptions opt;
  opt.timeout = 60s;
  struct Case {
    const char* name;
    std::function<void(Communicator&)> call;
    std::vector<std::string> expect;
  };
  const std::vector<Case> cases = {
      {"shapes",
       [](Communicator& c) {
         Tensor x = Tensor::empty({Shape{4 + c.rank()}, DType::f32});
         c.all_reduce(x);
       },
       {"rank 0 calls all_reduce(f32[4], sum)", "rank 1 calls all_reduce(f32[5], sum)"}},
      {"dtypes",
       [](Communicator& c) {
         Tensor x = Tensor::empty({Shape{4}, c.rank() ? DType::f64 : DType::f32});
         c.broadcast(x, 0);
       },
       {"rank 0 calls broadcast(f32[4], root 0)", "rank 1 calls broadcast(f64[4], root 0)"}},
      {"kinds",
       [](Communicator& c) {
         Tensor x = Tensor::empty({Shape{4}, DType::f32});
         if (c.rank()) c.broadcast(x, 1);
         else c.all_reduce(x, ReduceOp::Max);
       },
       {"rank 0 calls all_reduce(f32[4], max)", "rank 1 calls broadcast(f32[4], root 1)"}},
      {"ops",
       [](Communicator& c) {
         Tensor x = Tensor::empty({Shape{4}, DType::f32});
         Tensor y = Tensor::empty({Shape{2}, DType::f32});
         c.reduce_scatter(x, y, 0, c.rank() ? ReduceOp::Sum : ReduceOp::Min);
       },
       {"rank 0 calls reduce_scatter(f32[4], axis 0, min)", "rank 1 calls reduce_scatter(f32[4], axis 0, sum)"}},
      {"bad out on one rank",
       [](Communicator& c) {
         Tensor x = Tensor::empty({Shape{2, 3}, DType::f32});
         Tensor y = Tensor::empty({Shape{2, c.rank() ? 7 : 6}, DType::f32});
         c.all_gather(x, y, -1);
       },
       {"rank 1: all_gather: out is f32[2, 7] but gathering f32[2, 3] along axis -1 over 2 ranks gives f32[2, 6]"}},
  };
  for (const Case& k : cases) {
    const auto t0 = std::chrono::steady_clock::now();
    auto errors = run_ranks(2, [&](Communicator& c) {
      EXPECT_THROW(k.call(c), InternalError);
      try {
        k.call(c);
      } catch (const InternalError& e) {
        for (const auto& s : k.expect) EXPECT_NE(std::string(e.what()).find(s), std::string::npos) << e.what();
      }
      Tensor z = Tensor::empty({Shape{2}, DType::f32});
      c.all_reduce(z);  // the group is still usable
    }, opt);
    expect_no_errors(errors);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s) << k.name;
  }
}

TEST(CommErrors, BadArgumentsAreReported) {
  auto errors = run_ranks(3, [&](Communicator& c) {
    auto expect_error = [&](const std::function<void()>& f, const std::string& text) {
      try {
        f();
        ADD_FAILURE() << "no error; expected " << text;
      } catch (const InternalError& e) {
        EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
      }
    };
    Tensor h = Tensor::empty({Shape{3}, DType::bf16});
    expect_error([&] { c.all_reduce(h); }, "all_reduce: cannot reduce bf16");
    Tensor i = Tensor::empty({Shape{3}, DType::i32});
    expect_error([&] { c.all_reduce(i, ReduceOp::Avg); }, "avg of i32 is not defined");
    Tensor x = Tensor::empty({Shape{4, 2}, DType::f32}), y = Tensor::empty({Shape{1, 2}, DType::f32});
    expect_error([&] { c.reduce_scatter(x, y, 0); }, "axis 0 of f32[4, 2] (4) is not divisible by the group size 3");
    expect_error([&] { c.all_gather(x, y, 2); }, "all_gather: axis 2 is out of range for f32[4, 2]");
    expect_error([&] { c.all_to_all(x, y, 0, -3); }, "concat_axis -3 is out of range");
    expect_error([&] { c.all_gather(x, x, 0); }, "all_gather: out is f32[4, 2]");
    expect_error([&] { c.broadcast(x, 3); }, "broadcast: root 3 is not a rank of a group of 3");
    expect_error([&] { c.send(x, 5, 0); }, "send: peer 5 is not a rank of a group of 3");
    expect_error([&] { c.split({0, 1, 1, 2}); }, "rank 1 is listed twice");
  });
  expect_no_errors(errors);
  InProcWorld world(2);
  auto c0 = world.communicator(0);
  EXPECT_THROW(world.communicator(0), InternalError);
  EXPECT_THROW(world.communicator(2), InternalError);
}

TEST(CommErrors, RecvOfAnotherShapeIsReported) {
  auto errors = run_ranks(2, [&](Communicator& c) {
    Tensor x = Tensor::empty({Shape{3}, c.rank() ? DType::f64 : DType::f32});
    if (c.rank() == 0) c.send(x, 1, 4);
    else c.recv(x, 0, 4);
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_NE(errors[1].find("inproc recv from rank 0 to rank 1 tag 4 on group [0, 1]: rank 1 expects f64[3] but "
                           "rank 0 sent f32[3]"),
            std::string::npos)
      << errors[1];
}

TEST(CommErrors, TimeoutsNameTheOperationRanksAndTag) {
  InProcOptions opt;
  opt.timeout = 250ms;
  auto coll = run_ranks(3, [&](Communicator& c) {
    Tensor x = Tensor::empty({Shape{2}, DType::f32});
    if (c.rank() != 2) c.all_reduce(x);
  }, opt);
  EXPECT_EQ(coll[2], "");
  for (int r = 0; r < 2; ++r) {  // one rank times out; the other may be woken by the abort that follows
    EXPECT_NE(coll[r].find("waiting for ranks [2]; arrived: rank 0 in all_reduce, rank 1 in all_reduce"),
              std::string::npos) << coll[r];
    EXPECT_NE(coll[r].find("timed out after 0.25 s"), std::string::npos);
  }
  auto recv = run_ranks(2, [&](Communicator& c) {
    Tensor x = Tensor::empty({Shape{2}, DType::f32});
    if (c.rank() == 0) c.recv(x, 1, 5);
  }, opt);
  EXPECT_NE(recv[0].find("inproc recv from rank 1 to rank 0 tag 5 on group [0, 1]: timed out after 0.25 s: rank 1 "
                         "sent nothing"),
            std::string::npos) << recv[0];
  auto send = run_ranks(2, [&](Communicator& c) {
    Tensor x = Tensor::empty({Shape{2}, DType::f32});
    if (c.rank() == 0) {
      c.send(x, 1, 3);
      c.send(x, 1, 3);
    }
  }, opt);
  EXPECT_NE(send[0].find("inproc send from rank 0 to rank 1 tag 3 on group [0, 1]: timed out after 0.25 s: the "
                         "mailbox is full (capacity 1)"),
            std::string::npos) << send[0];
}

TEST(CommErrors, AbortWakesEveryWaiter) {
  InProcOptions opt;
  opt.timeout = 60s;
  InProcWorld world(3, opt);
  const auto t0 = std::chrono::steady_clock::now();
  std::thread aborter([&] {
    std::this_thread::sleep_for(50ms);
    world.abort("the executor of rank 2 failed");
  });
  auto errors = run_ranks(world, [&](Communicator& c) {
    Tensor x = Tensor::empty({Shape{2}, DType::f32});
    if (c.rank() == 0) c.barrier();
    if (c.rank() == 1) c.recv(x, 2, 0);
  });
  aborter.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
  EXPECT_NE(errors[0].find("inproc barrier at rank 0 of group [0, 1, 2]: the world was aborted: aborted: the "
                           "executor of rank 2 failed"),
            std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("inproc recv from rank 2 to rank 1 tag 0"), std::string::npos) << errors[1];
  EXPECT_NE(errors[1].find("the executor of rank 2 failed"), std::string::npos) << errors[1];

  // A worker aborting through its own communicator: its peers, in any group, stop waiting.
  auto by_rank = run_ranks(3, [&](Communicator& c) {
    auto pair = c.split(c.rank() < 2 ? std::vector<int>{0, 1} : std::vector<int>{2});
    if (c.rank() == 2) {
      std::this_thread::sleep_for(50ms);
      c.abort("loss is NaN");
      return;
    }
    pair->barrier();
    pair->barrier();
    c.barrier();
  }, opt);
  EXPECT_NE(by_rank[0].find("aborted by world rank 2: loss is NaN"), std::string::npos) << by_rank[0];
  EXPECT_NE(by_rank[1].find("aborted by world rank 2: loss is NaN"), std::string::npos) << by_rank[1];
}
