// The bytes format: windows and next-byte targets, sizes, seq inference and checks, short files, byte
// values above the vocabulary bound, and binding by name.
#include <gtest/gtest.h>

#include "io/dataset.h"
#include "io_test_util.h"

using namespace braid;
using namespace braid::io;
using namespace braid::io::testing;

namespace {

DataSourceSpec bytes_spec(const std::string& path, int64_t seq) {
  DataSourceSpec s;
  s.format = "bytes";
  s.path = path;
  s.seq = seq;
  return s;
}

std::string as_text(const Tensor& t, int64_t row, int64_t seq) {
  std::string s;
  for (int64_t j = 0; j < seq; ++j) s += static_cast<char>(get_as_double(t, row * seq + j));
  return s;
}

}  // namespace

TEST(DataBytes, WindowsAndTargets) {
  TempDir dir;
  write_file(dir.file("c.txt"), "abcdefghij");  // 10 bytes, seq 3: (10 - 1) / 3 = 3 samples
  std::vector<DatasetInput> in = {input("tokens", Shape{3}, DType::i32, 256), input("targets", Shape{3}, DType::i64, 256)};
  auto ds = open_dataset(bytes_spec(dir.file("c.txt"), 3), in, 1);
  ASSERT_EQ(ds->size(), 3);
  auto out = read_batch(*ds, in, {2, 0});
  EXPECT_EQ(as_text(out[0], 0, 3), "ghi");
  EXPECT_EQ(as_text(out[1], 0, 3), "hij");
  EXPECT_EQ(as_text(out[0], 1, 3), "abc");
  EXPECT_EQ(as_text(out[1], 1, 3), "bcd");
}

TEST(DataBytes, SizeDropsTheTail) {
  TempDir dir;
  write_file(dir.file("c.txt"), std::string(12, 'x'));  // (12 - 1) / 4 = 2
  std::vector<DatasetInput> in = {input("t", Shape{4}, DType::i32), input("y", Shape{4}, DType::i32)};
  EXPECT_EQ(open_dataset(bytes_spec(dir.file("c.txt"), 4), in, 1)->size(), 2);
  write_file(dir.file("c.txt"), std::string(13, 'x'));  // (13 - 1) / 4 = 3
  EXPECT_EQ(open_dataset(bytes_spec(dir.file("c.txt"), 4), in, 1)->size(), 3);
}

TEST(DataBytes, SeqFromInputWhenUnset) {
  TempDir dir;
  write_file(dir.file("c.txt"), "0123456789");
  std::vector<DatasetInput> in = {input("t", Shape{2}, DType::i32), input("y", Shape{2}, DType::i32)};
  auto ds = open_dataset(bytes_spec(dir.file("c.txt"), 0), in, 1);
  EXPECT_EQ(ds->size(), 4);
}

TEST(DataBytes, SeqMismatchAndShortFile) {
  TempDir dir;
  write_file(dir.file("c.txt"), "0123456789");
  std::vector<DatasetInput> in = {input("t", Shape{4}, DType::i32), input("y", Shape{4}, DType::i32)};
  std::string e = user_error([&] { open_dataset(bytes_spec(dir.file("c.txt"), 3), in, 1); });
  EXPECT_NE(e.find("seq 3"), std::string::npos) << e;
  EXPECT_NE(e.find("[4]"), std::string::npos) << e;
  e = user_error([&] { open_dataset(bytes_spec(dir.file("c.txt"), 10), {input("t", Shape{10}, DType::i32), input("y", Shape{10}, DType::i32)}, 1); });
  EXPECT_NE(e.find("has 10 bytes"), std::string::npos) << e;
  EXPECT_NE(e.find("at least 11"), std::string::npos) << e;
  e = user_error([&] { open_dataset(bytes_spec(dir.file("none.txt"), 4), in, 1); });
  EXPECT_NE(e.find("none.txt"), std::string::npos) << e;
  e = user_error([&] { open_dataset(bytes_spec(dir.file("c.txt"), 4), {input("t", Shape{4}, DType::f32), input("y", Shape{4}, DType::i32)}, 1); });
  EXPECT_NE(e.find("byte tokens"), std::string::npos) << e;
}

TEST(DataBytes, ByteAboveVocabulary) {
  TempDir dir;
  write_file(dir.file("c.txt"), "hello, wörld!");
  std::vector<DatasetInput> in = {input("t", Shape{4}, DType::i32, 128), input("y", Shape{4}, DType::i32, 128)};
  std::string e = user_error([&] { open_dataset(bytes_spec(dir.file("c.txt"), 4), in, 1); });
  EXPECT_NE(e.find("outside [0, 128)"), std::string::npos) << e;
  EXPECT_NE(e.find("c.txt"), std::string::npos) << e;
}

TEST(DataBytes, BindByName) {
  TempDir dir;
  write_file(dir.file("c.txt"), "abcdefghij");
  auto spec = bytes_spec(dir.file("c.txt"), 3);
  spec.bind = {{"targets", "y"}, {"tokens", "x"}};
  std::vector<DatasetInput> in = {input("y", Shape{3}, DType::i32), input("x", Shape{3}, DType::i32)};
  auto ds = open_dataset(spec, in, 1);
  auto out = read_batch(*ds, in, {0});
  EXPECT_EQ(as_text(out[0], 0, 3), "bcd");  // y = targets
  EXPECT_EQ(as_text(out[1], 0, 3), "abc");  // x = tokens
}
