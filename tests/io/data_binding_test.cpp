// Binding fields to model inputs (in order, by `bind`, partially by `bind`), every binding mistake reported
// together at the data source's place in the run file, unsupported input dtypes and formats, and the
// checks read() makes on the caller's tensors.
#include <gtest/gtest.h>

#include "io/dataset.h"
#include "io_test_util.h"

using namespace braid;
using namespace braid::io;
using namespace braid::io::testing;

namespace {

struct Corpus {
  TempDir dir;
  DataSourceSpec spec;
  Corpus() {
    write_file(dir.file("c.txt"), "abcdefghij");
    spec.format = "bytes";
    spec.path = dir.file("c.txt");
    spec.seq = 3;
  }
};

std::vector<DatasetInput> two(const std::string& a, const std::string& b) {
  return {input(a, Shape{3}, DType::i32), input(b, Shape{3}, DType::i32)};
}

int first_value(Dataset& ds, const std::vector<DatasetInput>& in, size_t k) {
  return read_batch(ds, in, {0})[k].data<int32_t>()[0];
}

}  // namespace

TEST(DataBinding, InOrderByDefault) {
  Corpus c;
  auto in = two("p", "q");
  auto ds = open_dataset(c.spec, in, 1);
  EXPECT_EQ(first_value(*ds, in, 0), 'a');  // tokens -> p
  EXPECT_EQ(first_value(*ds, in, 1), 'b');  // targets -> q
}

TEST(DataBinding, PartialBindFillsTheRestInOrder) {
  Corpus c;
  c.spec.bind = {{"tokens", "q"}};
  auto in = two("p", "q");
  auto ds = open_dataset(c.spec, in, 1);
  EXPECT_EQ(first_value(*ds, in, 0), 'b');  // targets -> p, the first free input
  EXPECT_EQ(first_value(*ds, in, 1), 'a');
}

TEST(DataBinding, UnknownNamesWithSuggestions) {
  Corpus c;
  c.spec.bind = {{"tokns", "p"}, {"targets", "qq"}};
  c.spec.loc = SourceLoc{"run.yaml", 4, 10};
  std::string e = user_error([&] { open_dataset(c.spec, two("p", "q"), 1); });
  EXPECT_NE(e.find("run.yaml:4:10: error: bind: bytes data has no field 'tokns'"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean 'tokens'?"), std::string::npos) << e;
  EXPECT_NE(e.find("the model has no input 'qq'"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean 'q'?"), std::string::npos) << e;
}

TEST(DataBinding, DoubleBindAndUnfedInput) {
  Corpus c;
  c.spec.bind = {{"tokens", "p"}, {"targets", "p"}};
  std::string e = user_error([&] { open_dataset(c.spec, two("p", "q"), 1); });
  EXPECT_NE(e.find("input 'p' gets both 'tokens' and 'targets'"), std::string::npos) << e;
  c.spec.bind = {};
  std::vector<DatasetInput> three = {input("p", Shape{3}, DType::i32), input("q", Shape{3}, DType::i32),
                                     input("r", Shape{3}, DType::i32)};
  e = user_error([&] { open_dataset(c.spec, three, 1); });
  EXPECT_NE(e.find("model input 'r' gets no data"), std::string::npos) << e;
  e = user_error([&] { open_dataset(c.spec, {input("p", Shape{3}, DType::i32)}, 1); });
  EXPECT_NE(e.find("field 'targets' of the bytes data feeds no model input"), std::string::npos) << e;
}

TEST(DataBinding, FormatAndDtypeErrors) {
  Corpus c;
  c.spec.format = "byte";
  std::string e = user_error([&] { open_dataset(c.spec, two("p", "q"), 1); });
  EXPECT_NE(e.find("unknown data format 'byte'"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean 'bytes'?"), std::string::npos) << e;
  c.spec.format = "synthetic";
  e = user_error([&] { open_dataset(c.spec, {input("h", Shape{4}, DType::bf16)}, 1); });
  EXPECT_NE(e.find("'h' is bf16"), std::string::npos) << e;
  c.spec.bind = {{"h", "h"}};
  e = user_error([&] { open_dataset(c.spec, {input("h", Shape{4}, DType::f32)}, 1); });
  EXPECT_NE(e.find("takes no `bind`"), std::string::npos) << e;
}

TEST(DataBinding, FileErrorsGetTheRunFilePlace) {
  Corpus c;
  c.spec.path = c.dir.file("missing.txt");
  c.spec.loc = SourceLoc{"run.yaml", 7, 3};
  std::string e = user_error([&] { open_dataset(c.spec, two("p", "q"), 1); });
  EXPECT_EQ(e.rfind("run.yaml:7:3: error: bytes file '", 0), 0u) << e;
  EXPECT_NE(e.find("missing.txt"), std::string::npos) << e;
}

TEST(DataBinding, ReadChecksTheCallersTensors) {
  Corpus c;
  auto in = two("p", "q");
  auto ds = open_dataset(c.spec, in, 1);
  std::vector<Tensor> out = {Tensor::empty({Shape{2, 3}, DType::i32}), Tensor::empty({Shape{2, 3}, DType::i32})};
  std::vector<int64_t> idx = {0, 1};
  ds->read(idx, out);  // fine
  std::vector<Tensor> wrong_dtype = {Tensor::empty({Shape{2, 3}, DType::i64}), out[1]};
  EXPECT_THROW(ds->read(idx, wrong_dtype), InternalError);
  std::vector<Tensor> wrong_batch = {Tensor::empty({Shape{3, 3}, DType::i32}), out[1]};
  EXPECT_THROW(ds->read(idx, wrong_batch), InternalError);
  std::vector<Tensor> too_few = {out[0]};
  EXPECT_THROW(ds->read(idx, too_few), InternalError);
  std::vector<int64_t> bad = {0, 3};
  EXPECT_THROW(ds->read(bad, out), InternalError);
}

TEST(DataBinding, NegativeLimit) {
  Corpus c;
  c.spec.limit = -1;
  std::string e = user_error([&] { open_dataset(c.spec, two("p", "q"), 1); });
  EXPECT_NE(e.find("limit must be positive"), std::string::npos) << e;
}
