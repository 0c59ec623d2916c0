// Tests of error formatting, did-you-mean and tensors.
#include <gtest/gtest.h>

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
