// Text to token ids and back through a SentencePiece model (Debian's libsentencepiece): train one on text
// files, or load an existing `.model` (Llama's, T5's, a braid-trained one). Text is encoded line by line, as
// `spm_encode` does: each line, with its newline, is one SentencePiece sentence. Models trained here use
// Llama's choices (no normalisation, whitespace kept, byte fallback, digits split) without the dummy prefix,
// so decode(encode(text)) == text byte for byte for valid UTF-8. A loaded model keeps its own normalisation.
// Errors in the user's files or options are UserErrors naming the file; SentencePiece's headers stay here.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace braid::io {

struct TokenizerTrainOptions {
  std::vector<std::string> inputs;  // text files; each line is a training sentence
  int64_t vocab_size = 8000;
  std::string model_type = "bpe";   // bpe | unigram
  double character_coverage = 0.9995;  // of characters kept as pieces; the rest fall back to bytes
  int64_t max_sentences = 0;        // 0: every line; else a random sample of this many lines
  int threads = 0;                  // 0: the CPUs this process may use
  uint64_t seed = 1;
};

// Trains a tokenizer; returns the serialized model (the bytes of a `.model` file). UserError for a missing
// input, an empty text, or what SentencePiece refuses (a vocabulary larger than the text allows, ...).
std::string train_tokenizer(const TokenizerTrainOptions& o);

class Tokenizer {
 public:
  // A `.model` file; UserError naming it when it is missing or not a SentencePiece model.
  static Tokenizer load(const std::string& path);
  // A serialized model (`shown` names it in errors).
  static Tokenizer from_bytes(const std::string& serialized, const std::string& shown);
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  const std::string& name() const { return name_; }  // the file it came from
  int64_t vocab_size() const;
  int eos_id() const;  // -1 when the model has none
  int bos_id() const;
  std::string piece(int id) const;
  // Appends the ids of `text` (split into lines, each encoded as one sentence) to `ids`. Thread-safe.
  void encode(std::string_view text, std::vector<int>& ids) const;
  // The text of `ids`; an id outside [0, vocab_size) is a UserError naming its 0-based position.
  std::string decode(std::span<const int> ids) const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl, std::string name);
  std::unique_ptr<Impl> impl_;
  std::string name_;
};

}  // namespace braid::io
