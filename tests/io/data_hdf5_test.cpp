// The hdf5 format: files written with write_tensors read back as datasets; values, dtype conversion,
// binding, limit, and errors naming the file and the dataset (missing, wrong shape, mismatched rows,
// non-integral floats for integer inputs, values out of range).
#include <gtest/gtest.h>

#include <limits>

#include "io/dataset.h"
#include "io/h5file.h"
#include "io_test_util.h"

using namespace braid;
using namespace braid::io;
using namespace braid::io::testing;

namespace {

struct H5Data {
  TempDir dir;
  std::string path;
  H5Data() {
    path = dir.file("d.h5");
    Tensor x = Tensor::empty({Shape{4, 2, 2}, DType::f32});
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(i) * 0.5f;
    Tensor y = Tensor::empty({Shape{4}, DType::i64});
    for (int64_t i = 0; i < 4; ++i) y.data<int64_t>()[i] = 3 - i;
    Tensor yf = Tensor::empty({Shape{4}, DType::f64});
    for (int64_t i = 0; i < 4; ++i) yf.data<double>()[i] = static_cast<double>(i);
    Tensor frac = yf.clone();
    frac.data<double>()[2] = 1.5;
    Tensor xi = Tensor::empty({Shape{4, 2, 2}, DType::i32});
    for (int64_t i = 0; i < xi.numel(); ++i) xi.data<int32_t>()[i] = static_cast<int32_t>(i);
    Tensor short_y = Tensor::empty({Shape{3}, DType::i64});
    write_tensors(path, {{"/x", x}, {"/y", y}, {"/labels/float", yf}, {"/frac", frac}, {"/xi", xi}, {"/short", short_y}});
  }
  DataSourceSpec spec(std::vector<std::pair<std::string, std::string>> fields) const {
    DataSourceSpec s;
    s.format = "hdf5";
    s.path = path;
    s.fields = std::move(fields);
    return s;
  }
};

}  // namespace

TEST(DataHdf5, ReadsRowsAndConverts) {
  H5Data d;
  std::vector<DatasetInput> in = {input("img", Shape{2, 2}, DType::f32), input("lbl", Shape{}, DType::i32, 10)};
  auto ds = open_dataset(d.spec({{"image", "/x"}, {"label", "/y"}}), in, 1);
  ASSERT_EQ(ds->size(), 4);
  auto out = read_batch(*ds, in, {2, 0});
  for (int j = 0; j < 4; ++j) {
    EXPECT_EQ(out[0].data<float>()[j], static_cast<float>(8 + j) * 0.5f);
    EXPECT_EQ(out[0].data<float>()[4 + j], static_cast<float>(j) * 0.5f);
  }
  EXPECT_EQ(out[1].data<int32_t>()[0], 1);
  EXPECT_EQ(out[1].data<int32_t>()[1], 3);
}

TEST(DataHdf5, IntegersToF64AndWholeFloatsToI64) {
  H5Data d;
  std::vector<DatasetInput> in = {input("img", Shape{2, 2}, DType::f64), input("lbl", Shape{}, DType::i64, 4)};
  auto ds = open_dataset(d.spec({{"image", "/xi"}, {"label", "/labels/float"}}), in, 1);
  auto out = read_batch(*ds, in, {3});
  EXPECT_EQ(out[0].data<double>()[3], 15.0);
  EXPECT_EQ(out[1].data<int64_t>()[0], 3);
}

TEST(DataHdf5, BindAndLimit) {
  H5Data d;
  auto spec = d.spec({{"image", "/x"}, {"label", "/y"}});
  spec.bind = {{"label", "lbl"}, {"image", "img"}};
  spec.limit = 3;
  std::vector<DatasetInput> in = {input("lbl", Shape{}, DType::i64), input("img", Shape{4}, DType::f32)};
  // img is [4] but the file holds [2, 2] per sample: hdf5 shapes must match exactly.
  std::string e = user_error([&] { open_dataset(spec, in, 1); });
  EXPECT_NE(e.find("per-sample shape [2, 2]"), std::string::npos) << e;
  EXPECT_NE(e.find("'img' has shape [4]"), std::string::npos) << e;
  EXPECT_NE(e.find("dataset '/x'"), std::string::npos) << e;
  EXPECT_NE(e.find(d.path), std::string::npos) << e;
  EXPECT_NE(e.find("same number of values"), std::string::npos) << e;

  in[1] = input("img", Shape{2, 2}, DType::f32);
  auto ds = open_dataset(spec, in, 1);
  EXPECT_EQ(ds->size(), 3);
  auto out = read_batch(*ds, in, {1});
  EXPECT_EQ(out[0].data<int64_t>()[0], 2);
  EXPECT_EQ(out[1].data<float>()[0], 2.0f);
}

TEST(DataHdf5, Errors) {
  H5Data d;
  std::vector<DatasetInput> in = {input("img", Shape{2, 2}, DType::f32), input("lbl", Shape{}, DType::i64, 3)};
  std::string e = user_error([&] { open_dataset(d.spec({{"image", "/x"}, {"label", "/nope"}}), in, 1); });
  EXPECT_NE(e.find("'/nope'"), std::string::npos) << e;
  EXPECT_NE(e.find(d.path), std::string::npos) << e;
  e = user_error([&] { open_dataset(d.spec({{"image", "/x"}, {"label", "/short"}}), in, 1); });
  EXPECT_NE(e.find("has 3 rows but field 'image' has 4"), std::string::npos) << e;
  e = user_error([&] { open_dataset(d.spec({{"image", "/x"}, {"label", "/frac"}}), in, 1); });
  EXPECT_NE(e.find("not an integer"), std::string::npos) << e;
  e = user_error([&] { open_dataset(d.spec({{"image", "/x"}, {"label", "/y"}}), in, 1); });
  EXPECT_NE(e.find("holds 3 at sample 0, outside [0, 3)"), std::string::npos) << e;
  e = user_error([&] { open_dataset(d.spec({{"image", "/x"}, {"label", "/labels"}}), in, 1); });
  EXPECT_NE(e.find("'/labels'"), std::string::npos) << e;  // a group, not a dataset
  auto spec = d.spec({{"image", "/x"}, {"label", "/y"}});
  spec.path = d.dir.file("absent.h5");
  spec.loc = SourceLoc{"run.yaml", 3, 9};
  e = user_error([&] { open_dataset(spec, in, 1); });
  EXPECT_EQ(e.rfind("run.yaml:3:9: error: HDF5 file '", 0), 0u) << e;
  EXPECT_NE(e.find("absent.h5"), std::string::npos) << e;
  e = user_error([&] { open_dataset(d.spec({}), in, 1); });
  EXPECT_NE(e.find("needs `fields`"), std::string::npos) << e;
}

// NaN or Inf in float data is refused at load, naming the file, the dataset and the sample (it would make
// every loss NaN, or, through relu before it kept NaN, train silently).
TEST(DataHdf5, NonFiniteValuesAreRefusedNamingTheSample) {
  TempDir dir;
  const std::string path = dir.file("nan.h5");
  Tensor x = Tensor::empty({Shape{4, 2}, DType::f32});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = 1.0f;
  x.data<float>()[5] = std::numeric_limits<float>::infinity();  // sample 2
  Tensor y = Tensor::empty({Shape{4}, DType::i64});
  for (int64_t i = 0; i < 4; ++i) y.data<int64_t>()[i] = 0;
  write_tensors(path, {{"/x", x}, {"/y", y}});
  DataSourceSpec s;
  s.format = "hdf5";
  s.path = path;
  s.fields = {{"image", "/x"}, {"label", "/y"}};
  std::vector<DatasetInput> in = {input("img", Shape{2}, DType::f32), input("lbl", Shape{}, DType::i64, 3)};
  std::string e = user_error([&] { open_dataset(s, in, 1); });
  EXPECT_NE(e.find(path), std::string::npos) << e;
  EXPECT_NE(e.find("'/x'"), std::string::npos) << e;
  EXPECT_NE(e.find("holds +Inf at sample 2"), std::string::npos) << e;
}
