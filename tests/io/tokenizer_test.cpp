// The SentencePiece wrapper: a tiny BPE and unigram tokenizer trained on the GPL-3 text this machine has,
// decode(encode(text)) == text byte for byte (unseen characters through byte fallback included), the ids
// written as a token file that the `tokens` data format opens against the vocabulary, training repeatable
// from its seed, and the refusals: corrupt or missing models, a vocabulary the text cannot fill, bad ids.
#include <gtest/gtest.h>

#include "io/dataset.h"
#include "io/token_file.h"
#include "io/tokenizer.h"
#include "io_test_util.h"

using namespace braid;
using namespace braid::io;
using namespace braid::io::testing;

namespace {

const char* kGpl = "/usr/share/common-licenses/GPL-3";

std::string trained(const std::string& type, int64_t vocab) {
  TokenizerTrainOptions o;
  o.inputs = {kGpl};
  o.vocab_size = vocab;
  o.model_type = type;
  return train_tokenizer(o);
}

}  // namespace

TEST(Tokenizer, RoundTripIsExact) {
  const std::string gpl = read_bytes(kGpl);
  ASSERT_GT(gpl.size(), 30000u);
  const std::string other = "  two leading spaces,\ttabs\t\nno newline at the end: w\xc3\xb6rld \xe2\x9c\x93 \xe6\x97\xa5\xe6\x9c\xac 12345";
  for (const std::string type : {"bpe", "unigram"}) {
    Tokenizer tok = Tokenizer::from_bytes(trained(type, 600), "gpl.model");
    EXPECT_EQ(tok.vocab_size(), 600) << type;
    for (const std::string& text : {gpl, other, std::string("\n\n\n"), std::string()}) {
      std::vector<int> ids;
      tok.encode(text, ids);
      for (int id : ids) ASSERT_TRUE(id >= 0 && id < tok.vocab_size()) << type << " id " << id;
      EXPECT_EQ(tok.decode(ids), text) << type;
    }
    std::vector<int> ids;
    tok.encode(gpl, ids);
    EXPECT_LT(ids.size(), gpl.size() / 2) << type << ": a 600-piece vocabulary should at least halve the bytes";
  }
}

TEST(Tokenizer, TokenFileOpensInTheTokensFormat) {
  TempDir dir;
  Tokenizer tok = Tokenizer::from_bytes(trained("bpe", 500), "gpl.model");
  std::vector<int> ids;
  tok.encode(read_bytes(kGpl), ids);
  {
    TokenFileWriter w(dir.file("gpl.bin"), TokenDType::u16);
    w.append(ids.data(), ids.size());
    w.commit();
  }
  DataSourceSpec s;
  s.format = "tokens";
  s.path = dir.file("gpl.bin");
  s.token_dtype = "u16";
  s.seq = 64;
  std::vector<DatasetInput> in = {input("tokens", Shape{64}, DType::i32, 500), input("targets", Shape{64}, DType::i32, 500)};
  auto ds = open_dataset(s, in, 1);
  EXPECT_EQ(ds->size(), static_cast<int64_t>(ids.size() - 1) / 64);
  auto out = read_batch(*ds, in, {3});
  std::vector<int> window(ids.begin() + 3 * 64, ids.begin() + 4 * 64);
  for (int j = 0; j < 64; ++j) EXPECT_EQ(get_as_double(out[0], j), window[static_cast<size_t>(j)]);
  EXPECT_FALSE(tok.decode(window).empty());
  // A model with a smaller vocabulary than the tokenizer's finds the first id past it.
  in = {input("tokens", Shape{64}, DType::i32, 300), input("targets", Shape{64}, DType::i32, 300)};
  size_t first = 0;
  while (ids[first] < 300) ++first;
  std::string e = user_error([&] { open_dataset(s, in, 1); });
  EXPECT_NE(e.find("at token " + std::to_string(first) + " (0-based)"), std::string::npos) << e;
}

TEST(Tokenizer, TrainingRepeatsFromItsSeed) {
  EXPECT_EQ(trained("unigram", 400), trained("unigram", 400));
  EXPECT_EQ(trained("bpe", 400), trained("bpe", 400));
}

TEST(Tokenizer, RefusesCorruptAndMissingModels) {
  TempDir dir;
  write_file(dir.file("junk.model"), std::string("\x0a\xff\xff\xff\xff\x0fnot a model at all", 24));
  std::string e = user_error([&] { Tokenizer::load(dir.file("junk.model")); });
  EXPECT_NE(e.find("junk.model' is not a SentencePiece model"), std::string::npos) << e;
  const std::string good = trained("bpe", 400);
  write_file(dir.file("cut.model"), good.substr(0, good.size() / 2));
  e = user_error([&] { Tokenizer::load(dir.file("cut.model")); });
  EXPECT_NE(e.find("cut.model' is not a SentencePiece model"), std::string::npos) << e;
  write_file(dir.file("empty.model"), "");
  e = user_error([&] { Tokenizer::load(dir.file("empty.model")); });
  EXPECT_NE(e.find("empty.model'"), std::string::npos) << e;
  e = user_error([&] { Tokenizer::load(dir.file("none.model")); });
  EXPECT_NE(e.find("none.model'"), std::string::npos) << e;
  write_file(dir.file("good.model"), good);
  EXPECT_EQ(Tokenizer::load(dir.file("good.model")).vocab_size(), 400);
}

TEST(Tokenizer, RefusesWhatCannotBeTrainedOrDecoded) {
  std::string e = user_error([] { trained("bpe", 1000000); });
  EXPECT_NE(e.find("Vocabulary size too high"), std::string::npos) << e;
  EXPECT_EQ(e.find("./src/"), std::string::npos) << e;  // SentencePiece's own source place is dropped
  e = user_error([] { trained("wordpiece", 400); });
  EXPECT_NE(e.find("unknown tokenizer model type 'wordpiece'"), std::string::npos) << e;
  e = user_error([] {
    TokenizerTrainOptions o;
    o.inputs = {"/nonexistent/text.txt"};
    train_tokenizer(o);
  });
  EXPECT_NE(e.find("text file not found: /nonexistent/text.txt"), std::string::npos) << e;
  Tokenizer tok = Tokenizer::from_bytes(trained("bpe", 400), "gpl.model");
  std::vector<int> ids = {5, 6, 400, 7};
  e = user_error([&] { tok.decode(ids); });
  EXPECT_NE(e.find("token id 400 at position 2 (0-based) is outside the vocabulary [0, 400)"), std::string::npos) << e;
}
