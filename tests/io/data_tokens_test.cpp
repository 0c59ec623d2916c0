// The tokens format: windows and next-token targets for each dtype, the sample count, ids past the
// vocabulary or negative (the file and the 0-based offset named), malformed files, `limit` bounding the
// scan, the run-file keys and their errors, and the scan's min/max against a plain loop.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "io/dataset.h"
#include "io/run_config.h"
#include "io/token_file.h"
#include "io_test_util.h"

using namespace braid;
using namespace braid::io;
using namespace braid::io::testing;

namespace {

template <typename T>
std::string token_bytes(const std::vector<T>& ids) {
  std::string s(ids.size() * sizeof(T), '\0');
  std::memcpy(s.data(), ids.data(), s.size());
  return s;
}

DataSourceSpec tokens_spec(const std::string& path, const std::string& dtype, int64_t seq) {
  DataSourceSpec s;
  s.format = "tokens";
  s.path = path;
  s.token_dtype = dtype;
  s.seq = seq;
  return s;
}

std::vector<int64_t> row(const Tensor& t, int64_t r, int64_t seq) {
  std::vector<int64_t> v;
  for (int64_t j = 0; j < seq; ++j) v.push_back(static_cast<int64_t>(get_as_double(t, r * seq + j)));
  return v;
}

using V = std::vector<int64_t>;

}  // namespace

TEST(DataTokens, WindowsAndTargetsEachDtype) {
  TempDir dir;
  write_file(dir.file("u16.bin"), token_bytes<uint16_t>({10, 11, 12, 13, 14, 15, 65535, 17, 18, 19}));
  write_file(dir.file("u32.bin"), token_bytes<uint32_t>({10, 11, 12, 13, 14, 15, 100000, 17, 18, 19}));
  write_file(dir.file("i32.bin"), token_bytes<int32_t>({10, 11, 12, 13, 14, 15, 2000000000, 17, 18, 19}));
  for (auto [file, dtype, big] : {std::tuple{"u16.bin", "u16", int64_t{65535}}, {"u32.bin", "u32", int64_t{100000}},
                                  {"i32.bin", "i32", int64_t{2000000000}}}) {
    std::vector<DatasetInput> in = {input("tokens", Shape{3}, DType::i32), input("targets", Shape{3}, DType::i64)};
    auto ds = open_dataset(tokens_spec(dir.file(file), dtype, 3), in, 1);
    ASSERT_EQ(ds->size(), 3) << dtype;  // (10 - 1) / 3
    auto out = read_batch(*ds, in, {2, 0, 1});
    EXPECT_EQ(row(out[0], 0, 3), (V{big, 17, 18})) << dtype;
    EXPECT_EQ(row(out[1], 0, 3), (V{17, 18, 19})) << dtype;
    EXPECT_EQ(row(out[0], 1, 3), (V{10, 11, 12})) << dtype;
    EXPECT_EQ(row(out[1], 1, 3), (V{11, 12, 13})) << dtype;
    EXPECT_EQ(row(out[0], 2, 3), (V{13, 14, 15})) << dtype;
    EXPECT_EQ(row(out[1], 2, 3), (V{14, 15, big})) << dtype;
    EXPECT_NE(ds->describe().find(std::string(dtype) + ", 10 tokens"), std::string::npos) << ds->describe();
  }
}

TEST(DataTokens, SampleCountDropsTheTail) {
  TempDir dir;
  std::vector<DatasetInput> in = {input("t", Shape{4}, DType::i32), input("y", Shape{4}, DType::i32)};
  write_file(dir.file("a.bin"), token_bytes(std::vector<uint16_t>(12, 1)));  // (12 - 1) / 4 = 2
  EXPECT_EQ(open_dataset(tokens_spec(dir.file("a.bin"), "u16", 4), in, 1)->size(), 2);
  write_file(dir.file("a.bin"), token_bytes(std::vector<uint16_t>(13, 1)));  // (13 - 1) / 4 = 3
  EXPECT_EQ(open_dataset(tokens_spec(dir.file("a.bin"), "u16", 4), in, 1)->size(), 3);
}

TEST(DataTokens, IdPastTheVocabularyNamesItsOffset) {
  TempDir dir;
  std::vector<uint16_t> ids(1000, 7);
  ids[613] = 300;
  ids[900] = 5000;
  write_file(dir.file("v.bin"), token_bytes(ids));
  std::vector<DatasetInput> in = {input("tokens", Shape{8}, DType::i32, 256), input("targets", Shape{8}, DType::i32, 256)};
  std::string e = user_error([&] { open_dataset(tokens_spec(dir.file("v.bin"), "u16", 8), in, 1); });
  EXPECT_NE(e.find("v.bin' holds id 300 at token 613 (0-based)"), std::string::npos) << e;
  EXPECT_NE(e.find("outside the vocabulary [0, 256) of input 'tokens'"), std::string::npos) << e;
  EXPECT_NE(e.find("largest id is 5000"), std::string::npos) << e;
  // The last id is only a target: tokens' check passes, targets' names it.
  ids.assign(17, 1);
  ids[16] = 256;
  write_file(dir.file("v.bin"), token_bytes(ids));
  e = user_error([&] { open_dataset(tokens_spec(dir.file("v.bin"), "u16", 8), in, 1); });
  EXPECT_NE(e.find("at token 16 (0-based)"), std::string::npos) << e;
  EXPECT_NE(e.find("of input 'targets'"), std::string::npos) << e;
  // The first id is only a token.
  ids.assign(17, 1);
  ids[0] = 999;
  write_file(dir.file("v.bin"), token_bytes(ids));
  e = user_error([&] { open_dataset(tokens_spec(dir.file("v.bin"), "u16", 8), in, 1); });
  EXPECT_NE(e.find("at token 0 (0-based)"), std::string::npos) << e;
  EXPECT_NE(e.find("of input 'tokens'"), std::string::npos) << e;
  // No bound (nothing consumes the input as an index): any u16 id is accepted.
  EXPECT_EQ(open_dataset(tokens_spec(dir.file("v.bin"), "u16", 8), {input("t", Shape{8}, DType::i32), input("y", Shape{8}, DType::i32)}, 1)->size(), 2);
}

TEST(DataTokens, NegativeI32AndU32PastI32) {
  TempDir dir;
  std::vector<int32_t> ids(40, 3);
  ids[25] = -4;
  write_file(dir.file("n.bin"), token_bytes(ids));
  std::vector<DatasetInput> in = {input("t", Shape{4}, DType::i32), input("y", Shape{4}, DType::i32)};
  std::string e = user_error([&] { open_dataset(tokens_spec(dir.file("n.bin"), "i32", 4), in, 1); });
  EXPECT_NE(e.find("negative id -4 at token 25 (0-based)"), std::string::npos) << e;
  std::vector<uint32_t> big(40, 3);
  big[31] = 3000000000u;  // fits u32, not an i32 input
  write_file(dir.file("b.bin"), token_bytes(big));
  e = user_error([&] { open_dataset(tokens_spec(dir.file("b.bin"), "u32", 4), in, 1); });
  EXPECT_NE(e.find("id 3000000000 at token 31"), std::string::npos) << e;
  std::vector<DatasetInput> in64 = {input("t", Shape{4}, DType::i64), input("y", Shape{4}, DType::i64)};
  auto ds = open_dataset(tokens_spec(dir.file("b.bin"), "u32", 4), in64, 1);
  EXPECT_EQ(row(read_batch(*ds, in64, {7})[0], 0, 4), (V{3, 3, 3, 3000000000LL}));
}

TEST(DataTokens, LimitBoundsTheScan) {
  TempDir dir;
  std::vector<uint16_t> ids(101, 1);
  ids[60] = 9999;  // past the vocabulary, but after the ids the first 5 windows of 10 use ([0, 51))
  write_file(dir.file("l.bin"), token_bytes(ids));
  std::vector<DatasetInput> in = {input("t", Shape{10}, DType::i32, 100), input("y", Shape{10}, DType::i32, 100)};
  auto spec = tokens_spec(dir.file("l.bin"), "u16", 10);
  spec.limit = 5;
  EXPECT_EQ(open_dataset(spec, in, 1)->size(), 5);
  spec.limit = 6;  // window 5 takes targets up to 60
  std::string e = user_error([&] { open_dataset(spec, in, 1); });
  EXPECT_NE(e.find("at token 60"), std::string::npos) << e;
}

TEST(DataTokens, MalformedFiles) {
  TempDir dir;
  std::vector<DatasetInput> in = {input("t", Shape{4}, DType::i32), input("y", Shape{4}, DType::i32)};
  std::string e = user_error([&] { open_dataset(tokens_spec(dir.file("none.bin"), "u16", 4), in, 1); });
  EXPECT_NE(e.find("none.bin': no such file"), std::string::npos) << e;
  write_file(dir.file("odd.bin"), std::string(11, '\1'));
  e = user_error([&] { open_dataset(tokens_spec(dir.file("odd.bin"), "u16", 4), in, 1); });
  EXPECT_NE(e.find("has 11 bytes, not a multiple of 2"), std::string::npos) << e;
  write_file(dir.file("odd.bin"), std::string(10, '\1'));
  e = user_error([&] { open_dataset(tokens_spec(dir.file("odd.bin"), "u32", 4), in, 1); });
  EXPECT_NE(e.find("not a multiple of 4 (the size of u32)"), std::string::npos) << e;
  write_file(dir.file("short.bin"), token_bytes(std::vector<uint16_t>(4, 1)));
  e = user_error([&] { open_dataset(tokens_spec(dir.file("short.bin"), "u16", 4), in, 1); });
  EXPECT_NE(e.find("holds 4 tokens; one window of seq 4 needs at least 5"), std::string::npos) << e;
  write_file(dir.file("empty.bin"), "");
  e = user_error([&] { open_dataset(tokens_spec(dir.file("empty.bin"), "u16", 4), in, 1); });
  EXPECT_NE(e.find("holds 0 tokens"), std::string::npos) << e;
  e = user_error([&] { open_dataset(tokens_spec(dir.path(), "u16", 4), in, 1); });
  EXPECT_NE(e.find("is not a regular file"), std::string::npos) << e;
  write_file(dir.file("ok.bin"), token_bytes(std::vector<uint16_t>(20, 1)));
  e = user_error([&] { open_dataset(tokens_spec(dir.file("ok.bin"), "u16", 3), in, 1); });
  EXPECT_NE(e.find("windows of seq 3"), std::string::npos) << e;
  e = user_error([&] { open_dataset(tokens_spec(dir.file("ok.bin"), "u16", 4), {input("t", Shape{4}, DType::f32), input("y", Shape{4}, DType::i32)}, 1); });
  EXPECT_NE(e.find("token ids [seq]"), std::string::npos) << e;
}

TEST(DataTokens, RunFileKeysAndTheirErrors) {
  TempDir dir;
  write_file(dir.file("m.yaml"),
             "name: m\nvars: {vocab: 50}\ninputs:\n  tokens: {shape: [4], dtype: i32}\n  targets: {shape: [4], dtype: i32}\n"
             "layers:\n  - {name: tok, op: embedding, from: tokens, num: vocab, dim: 8}\n"
             "  - {name: logits, op: linear, out: vocab}\n  - {name: loss, op: cross_entropy, from: [logits, targets]}\n"
             "outputs: [loss]\n");
  write_file(dir.file("d.bin"), token_bytes(std::vector<uint16_t>(41, 3)));
  auto run = [&](const std::string& data) {
    write_file(dir.file("r.yaml"), "model: m.yaml\ndata:\n  train: " + data +
                                       "\ntrain: {batch: 2, steps: 1}\noptimizer: {type: sgd, lr: 0.1}\n");
    return dir.file("r.yaml");
  };
  RunConfig cfg = load_run_or_model(run("{format: tokens, path: d.bin, dtype: u16, seq: 4}"), {});
  EXPECT_EQ(cfg.data.train.format, "tokens");
  EXPECT_EQ(cfg.data.train.token_dtype, "u16");
  EXPECT_EQ(cfg.data.train.seq, 4);
  EXPECT_EQ(cfg.data.train.path, dir.file("d.bin"));
  std::string e = user_error([&] { load_run_or_model(run("{format: tokens, path: d.bin, dtype: u8, seq: 4}"), {}); });
  EXPECT_NE(e.find("r.yaml:3:47: error: unknown token dtype 'u8'"), std::string::npos) << e;
  e = user_error([&] { load_run_or_model(run("{format: tokens, path: d.bin, dtype: u16}"), {}); });
  EXPECT_NE(e.find("r.yaml:3:10: error: data.train needs 'seq'"), std::string::npos) << e;
  e = user_error([&] { load_run_or_model(run("{format: tokens, path: d.bin, dtype: u16, seq: 0}"), {}); });
  EXPECT_NE(e.find("seq must be at least 1"), std::string::npos) << e;
  e = user_error([&] { load_run_or_model(run("{format: tokens, path: d.bin, seq: 4}"), {}); });
  EXPECT_NE(e.find("needs 'dtype'"), std::string::npos) << e;
  e = user_error([&] { load_run_or_model(run("{format: tokens, path: nope.bin, dtype: u16, seq: 4}"), {}); });
  EXPECT_NE(e.find("data file not found"), std::string::npos) << e;
  e = user_error([&] { load_run_or_model(run("{format: tokens, path: d.bin, dtype: u16, seq: 4, images: x}"), {}); });
  EXPECT_NE(e.find("images"), std::string::npos) << e;
}

TEST(TokenFile, RangeMatchesAPlainLoop) {
  TempDir dir;
  std::mt19937 rng(5);
  std::vector<int32_t> ids(3'000'017);  // more than two scan chunks, an odd tail
  for (auto& v : ids) v = static_cast<int32_t>(rng() % 200000) - 1000;
  write_file(dir.file("r.bin"), token_bytes(ids));
  auto f = TokenFile::open(dir.file("r.bin"), TokenDType::i32);
  ASSERT_EQ(f->size(), static_cast<int64_t>(ids.size()));
  for (auto [b, e] : {std::pair<int64_t, int64_t>{0, f->size()}, {1, 2}, {1048575, 2097153}, {5, 5}}) {
    int64_t mn = e > b ? INT64_MAX : 0, mx = e > b ? INT64_MIN : -1;
    for (int64_t i = b; i < e; ++i) mn = std::min<int64_t>(mn, ids[static_cast<size_t>(i)]), mx = std::max<int64_t>(mx, ids[static_cast<size_t>(i)]);
    TokenRange r = token_range(*f, b, e);
    EXPECT_EQ(r.min, mn) << b << ".." << e;
    EXPECT_EQ(r.max, mx) << b << ".." << e;
  }
  int64_t first = -1;
  for (size_t i = 0; i < ids.size() && first < 0; ++i)
    if (ids[i] < 0 || ids[i] >= 190000) first = static_cast<int64_t>(i);
  EXPECT_EQ(first_token_outside(*f, 0, f->size(), 0, 190000), first);
}

TEST(TokenFile, WriterIsAtomic) {
  TempDir dir;
  const std::string p = dir.file("w.bin");
  write_file(p, "old");
  {
    TokenFileWriter w(p, TokenDType::u16);
    std::vector<int> ids = {1, 2, 65535};
    w.append(ids.data(), ids.size());
    EXPECT_EQ(read_bytes(p), "old");  // not committed: the old file stands
  }
  EXPECT_EQ(read_bytes(p), "old");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1);  // the temporary is gone
  TokenFileWriter w(p, TokenDType::u32);
  std::vector<int> ids = {7, 70000};
  w.append(ids.data(), ids.size());
  w.commit();
  EXPECT_EQ(read_bytes(p), token_bytes<uint32_t>({7, 70000}));
}

TEST(TokenFile, DtypeChosenForTheVocabulary) {
  EXPECT_EQ(choose_token_dtype("", 65536, "t"), TokenDType::u16);
  EXPECT_EQ(choose_token_dtype("", 65537, "t"), TokenDType::u32);
  EXPECT_EQ(choose_token_dtype("i32", 128256, "t"), TokenDType::i32);
  EXPECT_EQ(choose_token_dtype("u32", 100, "t"), TokenDType::u32);
  std::string e = user_error([] { choose_token_dtype("u16", 128256, "tokenizer 'llama3.model'"); });
  EXPECT_NE(e.find("tokenizer 'llama3.model' has a vocabulary of 128256, too large for u16 (ids up to 65535)"),
            std::string::npos) << e;
  e = user_error([] { choose_token_dtype("u8", 100, "t"); });
  EXPECT_NE(e.find("unknown token dtype 'u8'"), std::string::npos) << e;
}
