// The float GEMM wrapper (ops/cpu/kernel_util.h): for every shape and transpose the models use, and odd
// sizes, the result has the same bits on 1, 2 and 3 threads (braid splits C into per-thread panels of
// single-threaded library calls), matches a double-precision reference, and runs the epilogue on every
// element exactly once. CTest runs this file once more with BRAID_SGEMM=openblas (tests/CMakeLists.txt).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "ops/cpu/kernel_util.h"

using namespace braid;

namespace {
struct Shape3 {
  int64_t m, n, k;
  bool ta, tb;
};

std::vector<float> run(const Shape3& s, const std::vector<float>& a, const std::vector<float>& b, int threads,
                       std::vector<int>* touched = nullptr) {
  const int64_t lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
  std::vector<float> c(static_cast<size_t>(s.m * s.n), 0.25f);  // beta = 1 adds onto this
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  if (touched) {
    touched->assign(c.size(), 0);
    struct Ctx {
      std::vector<int>* t;
      int64_t n;
    } ctx{touched, s.n};
    ops::cpu::GemmEpilogue ep{[](void* p, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
                                auto* x = static_cast<Ctx*>(p);
                                for (int64_t r = r0; r < r1; ++r)
                                  for (int64_t j = c0; j < c1; ++j) ++(*x->t)[static_cast<size_t>(r * x->n + j)];
                              },
                              &ctx};
    ops::cpu::gemm(s.ta, s.tb, s.m, s.n, s.k, 0.5f, a.data(), lda, b.data(), ldb, 1.0f, c.data(), s.n, ep);
  } else {
    ops::cpu::gemm(s.ta, s.tb, s.m, s.n, s.k, 0.5f, a.data(), lda, b.data(), ldb, 1.0f, c.data(), s.n);
  }
  omp_set_num_threads(saved);
  return c;
}
}  // namespace

TEST(Gemm, SameBitsOnAnyThreadCountAndCloseToDouble) {
  const std::vector<Shape3> shapes = {
      {256, 1024, 784, false, true},  {256, 784, 1024, false, false}, {1024, 784, 256, true, false},
      {2048, 256, 1024, false, true}, {1024, 256, 2048, true, false}, {128, 128, 64, false, true},
      {33, 1000, 517, false, true},   {1000, 33, 517, true, true},    {7, 5, 3, false, false},
      {64, 96, 40, true, true}};
  for (const auto& s : shapes) {
    std::vector<float> a(static_cast<size_t>(s.m * s.k)), b(static_cast<size_t>(s.k * s.n));
    for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(static_cast<double>(i * 7919 % 1000) / 1000.0 - 0.5);
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(static_cast<double>(i * 104729 % 997) / 997.0 - 0.5);
    const auto one = run(s, a, b, 1);
    for (int t : {2, 3}) {
      const auto many = run(s, a, b, t);
      EXPECT_EQ(std::memcmp(one.data(), many.data(), one.size() * sizeof(float)), 0)
          << s.m << "x" << s.n << "x" << s.k << " ta " << s.ta << " tb " << s.tb << ": " << t << " threads differ";
    }
    std::vector<int> touched;
    const auto with_ep = run(s, a, b, 2, &touched);
    EXPECT_EQ(std::memcmp(one.data(), with_ep.data(), one.size() * sizeof(float)), 0);
    for (int v : touched) ASSERT_EQ(v, 1) << "epilogue must visit every element once";
    const int64_t lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
    double worst = 0;
    for (int64_t i = 0; i < s.m; i += 1 + s.m / 16)  // a sample of rows (every column of them)
      for (int64_t j = 0; j < s.n; ++j) {
        double ref = 0.25, mag = 0.25;
        for (int64_t p = 0; p < s.k; ++p) {
          double x = a[static_cast<size_t>(s.ta ? p * lda + i : i * lda + p)];
          double y = b[static_cast<size_t>(s.tb ? j * ldb + p : p * ldb + j)];
          ref += 0.5 * x * y;
          mag += std::abs(0.5 * x * y);
        }
        worst = std::max(worst, std::abs(one[static_cast<size_t>(i * s.n + j)] - ref) / mag);
      }
    EXPECT_LT(worst, 1e-5) << s.m << "x" << s.n << "x" << s.k;
  }
}
