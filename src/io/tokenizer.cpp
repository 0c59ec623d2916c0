// The SentencePiece wrapper: training from line iterators over text files, loading with every failure
// turned into a UserError, and line-wise encoding.
#include "io/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <filesystem>
#include <fstream>
#include <unordered_map>

#include "core/error.h"
#include "core/parallel.h"
#include "io/paths.h"

namespace braid::io {

namespace {

// The lines of text files, newline removed, one file after another; a file that cannot be read ends the
// iteration with an error status.
class LineIterator final : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(const std::vector<std::string>& files) : files_(files) { Next(); }
  bool done() const override { return done_; }
  void Next() override {
    while (true) {
      if (in_.is_open() && std::getline(in_, line_)) {
        ++lines_;
        return;
      }
      if (in_.is_open()) in_.close();
      if (next_ == files_.size()) {
        done_ = true;
        return;
      }
      in_.open(files_[next_++], std::ios::binary);
      if (!in_) {
        status_ = sentencepiece::util::Status(sentencepiece::util::StatusCode::kNotFound,
                                              "cannot read '" + files_[next_ - 1] + "'");
        done_ = true;
        return;
      }
    }
  }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override { return status_; }
  int64_t lines() const { return lines_; }

 private:
  const std::vector<std::string>& files_;
  size_t next_ = 0;
  std::ifstream in_;
  std::string line_;
  bool done_ = false;
  int64_t lines_ = 0;
  sentencepiece::util::Status status_;
};

// SentencePiece's message without the place in its own source it comes from ("./src/x.cc(232) [cond] text").
std::string sp_message(const sentencepiece::util::Status& st, const std::string& otherwise) {
  std::string m = st.message();
  if (m.rfind("./src/", 0) == 0 || m.rfind("src/", 0) == 0) {
    const size_t open = m.find(" ["), close = m.find("] ");
    std::string text = close == std::string::npos ? "" : m.substr(close + 2);
    while (!text.empty() && text.back() == ' ') text.pop_back();
    if (text.empty() && open != std::string::npos) {  // only the failed condition: say that
      const size_t end = m.rfind(']');
      text = "its check " + m.substr(open + 2, end == std::string::npos || end < open + 2 ? std::string::npos : end - open - 2) +
             " failed";
    }
    m = text;
  }
  while (!m.empty() && m.back() == ' ') m.pop_back();
  return m.empty() ? otherwise : m;
}

// Lines longer than this are cut (before a space where one is near): SentencePiece's unigram lattice grows
// with the sentence, and a file without newlines would otherwise be one sentence.
constexpr size_t kMaxPiece = size_t{1} << 16;

}  // namespace

std::string train_tokenizer(const TokenizerTrainOptions& o) {
  if (o.inputs.empty()) throw UserError(SourceLoc{}, "tokenizer training needs at least one text file");
  for (const auto& f : o.inputs)
    if (!file_exists(f)) throw UserError(SourceLoc{}, "text file not found: " + f);
  if (o.model_type != "bpe" && o.model_type != "unigram")
    throw UserError(SourceLoc{}, "unknown tokenizer model type '" + o.model_type + "'", "choose bpe or unigram");
  if (o.vocab_size < 1 || o.vocab_size > (int64_t{1} << 31) - 1)
    throw UserError(SourceLoc{}, "tokenizer vocabulary size must be at least 1, got " + std::to_string(o.vocab_size));
  if (!(o.character_coverage > 0 && o.character_coverage <= 1))
    throw UserError(SourceLoc{}, "character coverage must lie in (0, 1], got " + std::to_string(o.character_coverage));
  std::error_code ec;
  bool any_text = false;
  for (const auto& f : o.inputs) any_text = any_text || std::filesystem::file_size(f, ec) > 0;
  if (!any_text) throw UserError(SourceLoc{}, "the text files are empty: nothing to train a tokenizer on");
  const int threads = o.threads > 0 ? o.threads : allowed_cpus();
  // Llama's trainer settings, less its dummy prefix (so that line-wise encoding decodes to the very text).
  std::unordered_map<std::string, std::string> args = {
      {"model_type", o.model_type},
      {"vocab_size", std::to_string(o.vocab_size)},
      {"character_coverage", std::to_string(o.character_coverage)},
      {"input_sentence_size", std::to_string(o.max_sentences)},
      {"shuffle_input_sentence", "true"},
      {"num_threads", std::to_string(threads)},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"add_dummy_prefix", "false"},
      {"byte_fallback", "true"},
      {"split_digits", "true"},
      {"allow_whitespace_only_pieces", "true"},
      {"max_sentence_length", std::to_string(kMaxPiece)},
      {"minloglevel", "1"},  // SentencePiece's progress log off; its warnings and errors stay
  };
  sentencepiece::SetRandomGeneratorSeed(static_cast<unsigned>(o.seed % 0xfffffffeu));
  LineIterator lines(o.inputs);
  std::string model;
  sentencepiece::util::Status st = sentencepiece::SentencePieceTrainer::Train(args, &lines, &model);
  if (!st.ok()) {
    std::string msg = sp_message(st, "SentencePiece gave no reason");
    std::string hint;
    if (msg.find("Vocabulary size") != std::string::npos || msg.find("vocab_size") != std::string::npos)
      hint = "a smaller --vocab-size, or more text (byte fallback alone takes 256 + 3 ids)";
    if (msg.find("sentences_.empty()") != std::string::npos) hint = "the text files hold no line with text";
    throw UserError(SourceLoc{}, "training the tokenizer failed: " + msg, hint);
  }
  if (lines.lines() == 0) throw UserError(SourceLoc{}, "the text files hold no lines to train a tokenizer on");
  return model;
}

struct Tokenizer::Impl {
  sentencepiece::SentencePieceProcessor sp;
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl, std::string name) : impl_(std::move(impl)), name_(std::move(name)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_bytes(const std::string& serialized, const std::string& shown) {
  auto impl = std::make_unique<Impl>();
  sentencepiece::util::Status st = impl->sp.LoadFromSerializedProto(serialized);
  if (!st.ok())
    throw UserError(SourceLoc{}, "tokenizer '" + shown + "' is not a SentencePiece model: " +
                                     sp_message(st, "it does not parse as one"),
                    "give a `.model` file written by SentencePiece or `braid tokenize train`");
  if (impl->sp.GetPieceSize() <= 0) throw UserError(SourceLoc{}, "tokenizer '" + shown + "' has no pieces");
  return Tokenizer(std::move(impl), shown);
}

Tokenizer Tokenizer::load(const std::string& path) {
  std::string bytes;
  try {
    bytes = read_file(path, size_t{1} << 30);
  } catch (const UserError& e) {
    throw UserError(SourceLoc{}, "tokenizer '" + path + "': " + e.diagnostics().front().message);
  }
  return from_bytes(bytes, path);
}

int64_t Tokenizer::vocab_size() const { return impl_->sp.GetPieceSize(); }
int Tokenizer::eos_id() const { return impl_->sp.eos_id(); }
int Tokenizer::bos_id() const { return impl_->sp.bos_id(); }

std::string Tokenizer::piece(int id) const {
  BRAID_ASSERT(id >= 0 && id < vocab_size(), "piece id ", id, " outside [0, ", vocab_size(), ")");
  return impl_->sp.IdToPiece(id);
}

void Tokenizer::encode(std::string_view text, std::vector<int>& ids) const {
  std::vector<int> part;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    end = end == std::string_view::npos ? text.size() : end + 1;
    if (end - at > kMaxPiece) {  // cut a long line before a space, else at a UTF-8 character's start
      size_t cut = text.rfind(' ', at + kMaxPiece);
      if (cut == std::string_view::npos || cut <= at + kMaxPiece / 2) {
        cut = at + kMaxPiece;
        while (cut > at + 1 && (static_cast<unsigned char>(text[cut]) & 0xc0) == 0x80) --cut;
      }
      end = cut;
    }
    sentencepiece::util::Status st = impl_->sp.Encode(text.substr(at, end - at), &part);
    if (!st.ok()) throw UserError(SourceLoc{}, "tokenizer '" + name_ + "' cannot encode the text: " + sp_message(st, "no reason given"));
    ids.insert(ids.end(), part.begin(), part.end());
    at = end;
  }
}

std::string Tokenizer::decode(std::span<const int> ids) const {
  const int64_t n = vocab_size();
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= n)
      throw UserError(SourceLoc{}, "token id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                                       " (0-based) is outside the vocabulary [0, " + std::to_string(n) +
                                       ") of tokenizer '" + name_ + "'");
  std::string text;
  sentencepiece::util::Status st = impl_->sp.Decode(std::vector<int>(ids.begin(), ids.end()), &text);
  if (!st.ok()) throw UserError(SourceLoc{}, "tokenizer '" + name_ + "' cannot decode: " + sp_message(st, "no reason given"));
  return text;
}

}  // namespace braid::io
