// `braid tokenize train | encode | decode`: SentencePiece tokenizers (io/tokenizer.h) and token files
// (io/token_file.h). encode reads text in blocks of whole lines, encodes each block's lines on every core
// (the ids do not depend on the thread count), writes the token file atomically, and shows a progress bar on a
// terminal for inputs of 16 MB or more. Every output is written to a temporary and renamed.
#include <chrono>
#include <filesystem>
#include <fstream>

#include "cli/commands.h"
#include "core/error.h"
#include "core/parallel.h"
#include "io/progress.h"
#include "io/token_file.h"
#include "io/tokenizer.h"

namespace braid::cli {

namespace {

const SourceLoc kCli{"<command line>", 0, 0};
constexpr int64_t kProgressMinBytes = int64_t{16} << 20;  // smaller inputs finish before a bar says anything
constexpr size_t kReadBlock = size_t{16} << 20;           // text read per step (whole lines)
constexpr size_t kEncodeBlock = size_t{256} << 10;        // text per parallel task (whole lines)

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Sizes of the text files, checked to be readable regular files.
int64_t text_bytes(const std::vector<std::string>& files) {
  if (files.empty()) throw UserError(kCli, "no text files given");
  int64_t total = 0;
  for (const auto& f : files) {
    std::error_code ec;
    if (!std::filesystem::exists(f, ec)) throw UserError(kCli, "text file not found: " + f);
    if (!std::filesystem::is_regular_file(f, ec)) throw UserError(kCli, "'" + f + "' is not a regular file");
    total += static_cast<int64_t>(std::filesystem::file_size(f, ec));
  }
  return total;
}

// The dtype of --dtype (or the default for the vocabulary), with the command line as its place.
io::TokenDType token_dtype_for(const std::string& name, int64_t vocab, const std::string& tokenizer) {
  try {
    return io::choose_token_dtype(name, vocab, "tokenizer '" + tokenizer + "'");
  } catch (const UserError& e) {
    throw UserError(kCli, "--dtype: " + e.diagnostics().front().message, e.diagnostics().front().hint);
  }
}

}  // namespace

int tokenize_train(const TokenizeTrainArgs& a, FILE* out) {
  if (a.out.empty()) throw UserError(kCli, "--out: where to write the tokenizer's .model file");
  const int64_t bytes = text_bytes(a.inputs);
  const auto t0 = std::chrono::steady_clock::now();
  io::TokenizerTrainOptions o;
  o.inputs = a.inputs;
  o.vocab_size = a.vocab_size;
  o.model_type = a.model_type;
  o.character_coverage = a.character_coverage;
  o.max_sentences = a.max_sentences;
  o.seed = a.seed;
  std::string model = io::train_tokenizer(o);
  io::Tokenizer tok = io::Tokenizer::from_bytes(model, a.out);  // what encode will load
  io::write_bytes_atomically(a.out, model);
  std::fprintf(out, "trained a %s tokenizer of %lld pieces on %zu file(s), %.2f MB of text, in %.2f s; wrote %s\n",
               a.model_type.c_str(), static_cast<long long>(tok.vocab_size()), a.inputs.size(),
               static_cast<double>(bytes) / 1e6, seconds_since(t0), a.out.c_str());
  return 0;
}

int tokenize_encode(const TokenizeEncodeArgs& a, FILE* out) {
  if (a.model.empty()) throw UserError(kCli, "--model: the tokenizer's .model file");
  if (a.out.empty()) throw UserError(kCli, "--out: where to write the token file");
  io::Tokenizer tok = io::Tokenizer::load(a.model);
  const io::TokenDType dtype = token_dtype_for(a.dtype, tok.vocab_size(), a.model);
  if (a.eos && tok.eos_id() < 0)
    throw UserError(kCli, "--eos: tokenizer '" + a.model + "' has no end-of-sequence piece");
  const int64_t total = text_bytes(a.inputs);
  for (const auto& f : a.inputs) {
    std::error_code ec;  // an --out that does not exist yet is no input
    if (std::filesystem::equivalent(f, a.out, ec))
      throw UserError(kCli, "--out '" + a.out + "' is one of the text files");
  }

  const auto t0 = std::chrono::steady_clock::now();
  io::TokenFileWriter w(a.out, dtype);
  io::ByteProgress bar(stderr, !a.no_progress && total >= kProgressMinBytes && io::Progress::is_tty(stderr), total,
                       "tokenize");
  int64_t done = 0;
  std::string text;
  std::vector<std::vector<int>> parts;
  for (const auto& f : a.inputs) {
    std::ifstream in(f, std::ios::binary);
    if (!in) throw UserError(kCli, "cannot read the text file '" + f + "'");
    std::string carry;
    while (true) {
      text = std::move(carry);
      carry.clear();
      const size_t had = text.size();
      text.resize(had + kReadBlock);
      in.read(text.data() + had, static_cast<std::streamsize>(kReadBlock));
      const auto got = static_cast<size_t>(in.gcount());
      text.resize(had + got);
      if (in.bad()) throw UserError(kCli, "cannot read the text file '" + f + "'");
      const bool last = got < kReadBlock;
      if (!last) {  // keep the partial last line for the next block
        size_t nl = text.rfind('\n');
        if (nl != std::string::npos) {
          carry.assign(text, nl + 1);
          text.resize(nl + 1);
        }
      }
      // Tasks of whole lines, about kEncodeBlock each, encoded in parallel, appended in order.
      std::vector<std::pair<size_t, size_t>> tasks;
      for (size_t b = 0; b < text.size();) {
        size_t e = std::min(text.size(), b + kEncodeBlock);
        if (e < text.size()) {
          size_t nl = text.find('\n', e);
          e = nl == std::string::npos ? text.size() : nl + 1;
        }
        tasks.emplace_back(b, e);
        b = e;
      }
      parts.assign(tasks.size(), {});
      const std::string_view all(text);
      parallel_for(static_cast<int64_t>(tasks.size()), 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          auto [s, t] = tasks[static_cast<size_t>(i)];
          tok.encode(all.substr(s, t - s), parts[static_cast<size_t>(i)]);
        }
      });
      for (const auto& p : parts) w.append(p.data(), p.size());
      done += static_cast<int64_t>(got);
      bar.update(done);
      if (last) break;
    }
    if (a.eos) {
      const int eos = tok.eos_id();
      w.append(&eos, 1);
    }
  }
  bar.finish();
  w.commit();
  const double s = seconds_since(t0);
  std::fprintf(out, "wrote %s: %lld tokens (%s) from %zu file(s), %.2f MB of text in %.2f s (%.2f MB/s); "
               "vocabulary %lld (%s)\n",
               a.out.c_str(), static_cast<long long>(w.written()), io::token_dtype_name(dtype), a.inputs.size(),
               static_cast<double>(total) / 1e6, s, s > 0 ? static_cast<double>(total) / 1e6 / s : 0.0,
               static_cast<long long>(tok.vocab_size()), a.model.c_str());
  return 0;
}

int tokenize_decode(const TokenizeDecodeArgs& a, FILE* out) {
  if (a.model.empty()) throw UserError(kCli, "--model: the tokenizer's .model file");
  if (a.tokens.empty() == a.ids.empty())
    throw UserError(kCli, "decode takes a token file or --ids, one of them", "e.g. braid tokenize decode --model m.model data.bin");
  io::Tokenizer tok = io::Tokenizer::load(a.model);
  std::vector<int> ids;
  if (!a.ids.empty()) {
    size_t i = 0;
    while (i < a.ids.size()) {
      while (i < a.ids.size() && (a.ids[i] == ',' || a.ids[i] == ' ')) ++i;
      if (i == a.ids.size()) break;
      size_t used = 0;
      long long v = 0;
      try {
        v = std::stoll(a.ids.substr(i), &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used == 0 || v < INT32_MIN || v > INT32_MAX)
        throw UserError(kCli, "--ids: '" + a.ids.substr(i, 20) + "' is not a token id", "ids separated by commas: --ids 1,2,3");
      ids.push_back(static_cast<int>(v));
      i += used;
    }
  } else {
    const io::TokenDType dtype = token_dtype_for(a.dtype, tok.vocab_size(), a.model);
    auto f = io::TokenFile::open(a.tokens, dtype);
    if (a.offset < 0 || a.offset > f->size())
      throw UserError(kCli, "--offset " + std::to_string(a.offset) + " lies outside the " + std::to_string(f->size()) +
                                " tokens of '" + a.tokens + "'");
    const int64_t end = a.count < 0 ? f->size() : std::min(f->size(), a.offset + a.count);
    const io::TokenRange r = io::token_range(*f, a.offset, end);
    if (r.min < 0 || r.max >= tok.vocab_size()) {
      const int64_t at = io::first_token_outside(*f, a.offset, end, 0, tok.vocab_size());
      throw UserError(kCli, "token file '" + a.tokens + "' holds id " + std::to_string(f->at(at)) + " at token " +
                                std::to_string(at) + " (0-based), outside the vocabulary [0, " +
                                std::to_string(tok.vocab_size()) + ") of tokenizer '" + a.model + "'",
                      "is it the tokenizer that wrote the file, and is --dtype right?");
    }
    ids.reserve(static_cast<size_t>(end - a.offset));
    for (int64_t i = a.offset; i < end; ++i) ids.push_back(static_cast<int>(f->at(i)));
  }
  const std::string text = tok.decode(ids);
  if (a.out.empty()) {
    std::fwrite(text.data(), 1, text.size(), out);
    std::fflush(out);
  } else {
    io::write_bytes_atomically(a.out, text);
  }
  return 0;
}

}  // namespace braid::cli
