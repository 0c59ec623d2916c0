// Tests of error formatting, did-you-mean and tensors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"

using namespace braid;

TEST(Error, FormatsLocationAndHint) {
  Diagnostic d{SourceLoc{"m.yaml", 3, 5}, "unknown op 'lnear'", "did you mean 'linear'?"};
  EXPECT_EQ(d.format(), "m.yaml:3:5: error: unknown op 'lnear'\n  hint: did you mean 'linear'?");
}

TEST(Error, DidYouMean) {
  EXPECT_EQ(did_you_mean("lnear", {"linear", "relu", "conv2d"}), "linear");
  EXPECT_EQ(did_you_mean("zzzzzz", {"linear", "relu"}), "");
}

TEST(Error, DiagnosticsCollectAll) {
  Diagnostics d;
  d.error({"a", 1, 1}, "x");
  d.error({"a", 2, 1}, "y");
  EXPECT_EQ(d.size(), 2u);
  EXPECT_THROW(d.throw_if_any(), UserError);
}

TEST(Error, AssertThrowsInternal) { EXPECT_THROW(BRAID_ASSERT(1 == 2, "math"), InternalError); }

TEST(Tensor, EmptyIsZeroAndReshapes) {
  Tensor t = Tensor::empty({Shape{2, 3}, DType::f32});
  EXPECT_EQ(t.numel(), 6);
  EXPECT_EQ(t.data<float>()[5], 0.f);
  EXPECT_EQ(t.reshaped(Shape{3, 2}).shape(), (Shape{3, 2}));
  EXPECT_THROW(t.data<double>(), InternalError);
}

TEST(Error, DidYouMeanCountsASwapAsOneEdit) {
  EXPECT_EQ(did_you_mean("dtpye", {"dtype", "shape"}), "dtype");
  EXPECT_EQ(did_you_mean("f23", {"f32", "f64", "i32"}), "f32");
}

namespace {

// The whole table, as did_you_mean computed it before it was banded: the slow, obvious reference.
size_t full_edit_distance(const std::string& a, const std::string& b) {
  auto eq = [](char x, char y) {
    return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
  };
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (eq(a[i - 1], b[j - 1]) ? 0 : 1)});
      if (i > 1 && j > 1 && eq(a[i - 1], b[j - 2]) && eq(a[i - 2], b[j - 1]))
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

}  // namespace

// The banded distance decides exactly as the full table: a candidate is suggested iff its distance is within
// the bound (a third of the longer length, at least 1). Small alphabets make near misses and swaps common.
TEST(Error, DidYouMeanBandMatchesFullTable) {
  uint64_t s = 12345;
  auto next = [&] { return s = s * 6364136223846793005ull + 1442695040888963407ull, s >> 33; };
  for (int t = 0; t < 20000; ++t) {
    std::string a, b;
    const char* alphabet = (t % 2) ? "abAB" : "abcd";
    size_t na = next() % 14, nb = next() % 14;
    for (size_t i = 0; i < na; ++i) a += alphabet[next() % 4];
    if (t % 3 == 0) {  // b a few edits from a
      b = a;
      for (int e = static_cast<int>(next() % 4); e > 0 && !b.empty(); --e) b[next() % b.size()] = alphabet[next() % 4];
    } else {
      for (size_t i = 0; i < nb; ++i) b += alphabet[next() % 4];
    }
    size_t limit = std::max<size_t>(1, std::max(a.size(), b.size()) / 3);
    bool close = full_edit_distance(a, b) <= limit;
    EXPECT_EQ(did_you_mean(a, {b}), close ? b : "") << "'" << a << "' vs '" << b << "'";
  }
}

TEST(Error, DidYouMeanPicksTheClosestFirst) {
  EXPECT_EQ(did_you_mean("conv", {"convv", "conv", "con"}), "conv");
  EXPECT_EQ(did_you_mean("abcdef", {"abcdxy", "abcdex", "abcdey"}), "abcdex");  // the first of equals
  EXPECT_EQ(did_you_mean("reul", {"relu", "rule"}), "relu");
}

// Long names: near misses up to the cap are still found; past it nothing is suggested, at no cost.
TEST(Error, DidYouMeanIsBoundedForLongNames) {
  std::string at_cap(kMaxSuggestLength, 'x'), near = at_cap;
  near[100] = 'y';
  EXPECT_EQ(did_you_mean(near, {"x", at_cap}), at_cap);
  std::string huge(100000, 'x'), huge_near = huge;
  huge_near[50000] = 'y';
  EXPECT_EQ(did_you_mean(huge_near, {huge}), "");
  EXPECT_EQ(did_you_mean("xx", {huge, "xy"}), "xy");
  std::vector<std::string> many(50, std::string(20000, 'a'));
  EXPECT_EQ(did_you_mean(std::string(20000, 'b'), many), "");
  std::string mb(1 << 20, 'r');
  EXPECT_EQ(did_you_mean(mb, {"relu", "linear"}), "");
}

TEST(Error, DiagnosticsFullAtTheCap) {
  Diagnostics d;
  for (size_t i = 0; i < Diagnostics::kMaxErrors; ++i) {
    EXPECT_FALSE(d.full());
    d.error({"a", static_cast<int>(i) + 1, 1}, "x");
  }
  EXPECT_TRUE(d.full());
}
