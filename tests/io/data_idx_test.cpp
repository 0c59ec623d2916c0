// The idx format: exact values from small plain and gzip files, reshaping to the input, every rejection
// (bad magic, truncation, swapped files, count and shape mismatches, labels out of range), and the real
// Fashion-MNIST test set when the system has it.
#include <gtest/gtest.h>

#include <filesystem>

#include "io/dataset.h"
#include "io_test_util.h"

using namespace braid;
using namespace braid::io;
using namespace braid::io::testing;

namespace {

constexpr int kN = 5, kRows = 2, kCols = 3;

std::vector<uint8_t> pixels() {
  std::vector<uint8_t> p(kN * kRows * kCols);
  for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<uint8_t>((i * 37 + 11) % 256);
  p[0] = 0, p[1] = 255;
  return p;
}
const std::vector<uint8_t> kLabels = {3, 1, 4, 1, 5};

struct IdxFiles {
  TempDir dir;
  std::string images, labels;
  explicit IdxFiles(bool gz) {
    images = dir.file(gz ? "img.gz" : "img");
    labels = dir.file(gz ? "lbl.gz" : "lbl");
    auto w = gz ? write_gz : write_file;
    w(images, idx_bytes({kN, kRows, kCols}, pixels()));
    w(labels, idx_bytes({kN}, kLabels));
  }
  DataSourceSpec spec() const {
    DataSourceSpec s;
    s.format = "idx";
    s.images = images;
    s.labels = labels;
    return s;
  }
};

void check_exact(bool gz, Shape image_shape, DType label_type) {
  IdxFiles f(gz);
  std::vector<DatasetInput> in = {input("x", image_shape, DType::f32), input("y", Shape{}, label_type, 10)};
  auto ds = open_dataset(f.spec(), in, 1);
  ASSERT_EQ(ds->size(), kN);
  auto out = read_batch(*ds, in, {4, 0, 2});
  const std::vector<int64_t> idx = {4, 0, 2};
  auto px = pixels();
  for (size_t b = 0; b < idx.size(); ++b) {
    for (int j = 0; j < kRows * kCols; ++j)
      EXPECT_EQ(out[0].data<float>()[b * 6 + j], static_cast<float>(px[idx[b] * 6 + j]) / 255.0f);
    EXPECT_EQ(get_as_double(out[1], static_cast<int64_t>(b)), kLabels[static_cast<size_t>(idx[b])]);
  }
  EXPECT_EQ(out[0].data<float>()[6], 0.0f);  // sample 0, pixel 0
  EXPECT_EQ(out[0].data<float>()[7], 1.0f);  // sample 0, pixel 1 = 255
}

}  // namespace

TEST(DataIdx, PlainFlatI64) { check_exact(false, Shape{6}, DType::i64); }
TEST(DataIdx, GzipChannelsI32) { check_exact(true, Shape{1, 2, 3}, DType::i32); }

TEST(DataIdx, F64ImagesAndDescribe) {
  IdxFiles f(true);
  std::vector<DatasetInput> in = {input("x", Shape{3, 2}, DType::f64), input("y", Shape{}, DType::i64, 10)};
  auto ds = open_dataset(f.spec(), in, 1);
  auto out = read_batch(*ds, in, {0});
  EXPECT_EQ(out[0].data<double>()[1], 1.0);
  EXPECT_NE(ds->describe().find("idx: 5 samples"), std::string::npos) << ds->describe();
  EXPECT_NE(ds->describe().find("images -> x f64[3, 2]"), std::string::npos) << ds->describe();
}

TEST(DataIdx, Limit) {
  IdxFiles f(false);
  auto spec = f.spec();
  spec.limit = 2;
  std::vector<DatasetInput> in = {input("x", Shape{6}, DType::f32), input("y", Shape{}, DType::i64)};
  auto ds = open_dataset(spec, in, 1);
  EXPECT_EQ(ds->size(), 2);
  EXPECT_THROW(read_batch(*ds, in, {2}), InternalError);
}

TEST(DataIdx, ShapeMismatchNamesFileAndShapes) {
  IdxFiles f(false);
  std::vector<DatasetInput> in = {input("x", Shape{1, 28, 28}, DType::f32), input("y", Shape{}, DType::i64)};
  std::string e = user_error([&] { open_dataset(f.spec(), in, 1); });
  EXPECT_NE(e.find(f.images), std::string::npos) << e;
  EXPECT_NE(e.find("[2, 3]"), std::string::npos) << e;
  EXPECT_NE(e.find("[1, 28, 28]"), std::string::npos) << e;
}

TEST(DataIdx, TypeMismatches) {
  IdxFiles f(false);
  std::string e = user_error([&] {
    open_dataset(f.spec(), {input("x", Shape{6}, DType::i32), input("y", Shape{}, DType::i64)}, 1);
  });
  EXPECT_NE(e.find("floats in [0, 1]"), std::string::npos) << e;
  e = user_error([&] {
    open_dataset(f.spec(), {input("x", Shape{6}, DType::f32), input("y", Shape{}, DType::f32)}, 1);
  });
  EXPECT_NE(e.find("one integer per sample"), std::string::npos) << e;
}

TEST(DataIdx, BadMagic) {
  IdxFiles f(false);
  std::string bad = idx_bytes({kN, kRows, kCols}, pixels());
  bad[0] = 0x12;
  write_file(f.images, bad);
  std::string e = user_error([&] {
    open_dataset(f.spec(), {input("x", Shape{6}, DType::f32), input("y", Shape{}, DType::i64)}, 1);
  });
  EXPECT_NE(e.find("not an IDX file"), std::string::npos) << e;
  EXPECT_NE(e.find(f.images), std::string::npos) << e;

  bad = idx_bytes({kN, kRows, kCols}, pixels());
  bad[2] = 0x0D;  // float data
  write_file(f.images, bad);
  e = user_error([&] {
    open_dataset(f.spec(), {input("x", Shape{6}, DType::f32), input("y", Shape{}, DType::i64)}, 1);
  });
  EXPECT_NE(e.find("element type"), std::string::npos) << e;
}

TEST(DataIdx, SwappedFilesGetAHint) {
  IdxFiles f(false);
  auto spec = f.spec();
  std::swap(spec.images, spec.labels);
  std::string e = user_error([&] {
    open_dataset(spec, {input("x", Shape{6}, DType::f32), input("y", Shape{}, DType::i64)}, 1);
  });
  EXPECT_NE(e.find("swapped"), std::string::npos) << e;
}

TEST(DataIdx, TruncatedPlainAndGzip) {
  for (bool gz : {false, true}) {
    IdxFiles f(gz);
    std::string full = idx_bytes({kN, kRows, kCols}, pixels());
    std::string cut = full.substr(0, full.size() - 7);
    if (gz) {
      write_gz(f.images, cut);  // a complete gzip stream of too little data
    } else {
      write_file(f.images, cut);
    }
    std::string e = user_error([&] {
      open_dataset(f.spec(), {input("x", Shape{6}, DType::f32), input("y", Shape{}, DType::i64)}, 1);
    });
    EXPECT_NE(e.find("truncated"), std::string::npos) << e;
    EXPECT_NE(e.find(f.images), std::string::npos) << e;
  }
  // A gzip stream cut in the middle (a partial download).
  IdxFiles f(true);
  std::string gz = read_bytes(f.labels);
  write_file(f.labels, gz.substr(0, gz.size() / 2));
  std::string e = user_error([&] {
    open_dataset(f.spec(), {input("x", Shape{6}, DType::f32), input("y", Shape{}, DType::i64)}, 1);
  });
  EXPECT_NE(e.find(f.labels), std::string::npos) << e;
  // Header only, no data; and a header claiming far more than the file can hold.
  write_file(f.labels, idx_bytes({kN}, {}));
  e = user_error([&] {
    open_dataset(f.spec(), {input("x", Shape{6}, DType::f32), input("y", Shape{}, DType::i64)}, 1);
  });
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  write_file(f.labels, idx_bytes({0x7fffffff}, {1, 2}));
  e = user_error([&] {
    open_dataset(f.spec(), {input("x", Shape{6}, DType::f32), input("y", Shape{}, DType::i64)}, 1);
  });
  EXPECT_NE(e.find("truncated or corrupt"), std::string::npos) << e;
}

TEST(DataIdx, TrailingBytesAndCountMismatch) {
  IdxFiles f(false);
  write_file(f.labels, idx_bytes({kN}, kLabels) + "x");
  std::string e = user_error([&] {
    open_dataset(f.spec(), {input("x", Shape{6}, DType::f32), input("y", Shape{}, DType::i64)}, 1);
  });
  EXPECT_NE(e.find("bytes after"), std::string::npos) << e;
  write_file(f.labels, idx_bytes({4}, {1, 2, 3, 4}));
  e = user_error([&] {
    open_dataset(f.spec(), {input("x", Shape{6}, DType::f32), input("y", Shape{}, DType::i64)}, 1);
  });
  EXPECT_NE(e.find("5 samples"), std::string::npos) << e;
  EXPECT_NE(e.find("hold 4"), std::string::npos) << e;
}

TEST(DataIdx, MissingFileAndLabelsOutOfRange) {
  IdxFiles f(false);
  auto spec = f.spec();
  spec.labels = f.dir.file("nope.gz");
  std::string e = user_error([&] {
    open_dataset(spec, {input("x", Shape{6}, DType::f32), input("y", Shape{}, DType::i64)}, 1);
  });
  EXPECT_NE(e.find("nope.gz"), std::string::npos) << e;
  e = user_error([&] {
    open_dataset(f.spec(), {input("x", Shape{6}, DType::f32), input("y", Shape{}, DType::i64, 4)}, 1);
  });
  EXPECT_NE(e.find("holds 4 at sample 2, outside [0, 4)"), std::string::npos) << e;
}

TEST(DataIdx, RealFashionMnistTestSet) {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  if (!std::filesystem::exists(dir + "/t10k-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "Fashion-MNIST not installed at " << dir << " (package dataset-fashion-mnist)";
  DataSourceSpec spec;
  spec.format = "idx";
  spec.images = dir + "/t10k-images-idx3-ubyte.gz";
  spec.labels = dir + "/t10k-labels-idx1-ubyte.gz";
  std::vector<DatasetInput> in = {input("x", Shape{1, 28, 28}, DType::f32), input("y", Shape{}, DType::i64, 10)};
  auto ds = open_dataset(spec, in, 1);
  ASSERT_EQ(ds->size(), 10000);
  std::vector<int64_t> all(10000);
  for (int64_t i = 0; i < 10000; ++i) all[static_cast<size_t>(i)] = i;
  auto out = read_batch(*ds, in, all);
  std::vector<int64_t> per_class(10, 0);
  for (int64_t i = 0; i < 10000; ++i) {
    int64_t y = out[1].data<int64_t>()[i];
    ASSERT_TRUE(y >= 0 && y < 10) << y;
    ++per_class[static_cast<size_t>(y)];
  }
  for (int64_t c : per_class) EXPECT_EQ(c, 1000);  // the test set is balanced
  float lo = 1, hi = 0;
  double sum = 0;
  for (int64_t j = 0; j < out[0].numel(); ++j) {
    float v = out[0].data<float>()[j];
    lo = std::min(lo, v), hi = std::max(hi, v);
    sum += v;
  }
  EXPECT_EQ(lo, 0.0f);
  EXPECT_EQ(hi, 1.0f);
  double mean = sum / static_cast<double>(out[0].numel());
  EXPECT_NEAR(mean, 0.286, 0.01);  // Fashion-MNIST's well-known pixel mean
}
