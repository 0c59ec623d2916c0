// The tokens format: a flat little-endian file of token ids (io/token_file.h), memory-mapped. As bytes does,
// sample i is the window [i*seq, i*seq + seq) as `tokens` and the next ids [i*seq + 1, i*seq + seq + 1) as
// `targets`, so N ids hold (N - 1) / seq samples. Every id a loaded sample can touch is checked once at open
// against the bound of the input it feeds (the vocabulary of the layer consuming it); an id past it, or a
// negative i32 id, names the file and its 0-based token offset. Reading a sample converts one window.
#include <limits>

#include "io/datasets/source.h"
#include "io/token_file.h"

namespace braid::io::data {

namespace {

class TokenReader final : public FieldReader {
 public:
  TokenReader(std::shared_ptr<const TokenFile> file, int64_t offset, int64_t seq, DType dtype)
      : file_(std::move(file)), offset_(offset), seq_(seq), dtype_(dtype) {}

  void write(int64_t i, void* dst) const override {
    const int64_t first = offset_ + i * seq_;
    switch (file_->dtype()) {
      case TokenDType::u16: return copy(static_cast<const uint16_t*>(file_->data()) + first, dst);
      case TokenDType::u32: return copy(static_cast<const uint32_t*>(file_->data()) + first, dst);
      case TokenDType::i32: return copy(static_cast<const int32_t*>(file_->data()) + first, dst);
    }
  }

 private:
  template <typename T>
  void copy(const T* src, void* dst) const {
    if (dtype_ == DType::i32) {
      auto* d = static_cast<int32_t*>(dst);
      for (int64_t j = 0; j < seq_; ++j) d[j] = static_cast<int32_t>(src[j]);  // checked at open to fit
    } else {
      auto* d = static_cast<int64_t*>(dst);
      for (int64_t j = 0; j < seq_; ++j) d[j] = static_cast<int64_t>(src[j]);
    }
  }
  std::shared_ptr<const TokenFile> file_;
  int64_t offset_, seq_;
  DType dtype_;
};

}  // namespace

std::vector<std::string> tokens_fields(const DataSourceSpec&) { return {"tokens", "targets"}; }

Loaded load_tokens(const LoadContext& c) {
  const DataSourceSpec& spec = c.spec;
  if (spec.path.empty()) c.fail("tokens data needs a `path` (a file of token ids)");
  const std::optional<TokenDType> dtype = parse_token_dtype(spec.token_dtype);
  if (!dtype) c.fail("tokens data needs `dtype`: u16, u32 or i32 (got '" + spec.token_dtype + "')");
  if (spec.seq < 1) c.fail("tokens data needs `seq`, the window length, at least 1");
  const int64_t seq = spec.seq;
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    const DatasetInput& in = c.inputs[k];
    if ((in.sample.dtype != DType::i32 && in.sample.dtype != DType::i64) || in.sample.shape.rank() != 1)
      c.fail("tokens data fills '" + c.field_of[k] + "' with token ids [seq], but input '" + in.name + "' is " +
                 in.sample.str(),
             "declare it {shape: [seq], dtype: i32}");
    if (in.sample.shape[0] != seq)
      c.fail("tokens data from '" + spec.path + "' has windows of seq " + std::to_string(seq) + " but input '" +
                 in.name + "' has shape " + in.sample.shape.str(),
             "seq must equal the model's input length");
  }
  std::shared_ptr<const TokenFile> file;
  try {
    file = TokenFile::open(spec.path, *dtype);
  } catch (const UserError& e) {
    c.fail(e.diagnostics().front().message, e.diagnostics().front().hint);
  }
  const int64_t n = file->size();
  if (n < seq + 1)
    c.fail("token file '" + spec.path + "' holds " + std::to_string(n) + " tokens; one window of seq " +
           std::to_string(seq) + " needs at least " + std::to_string(seq + 1));
  Loaded out;
  out.size = (n - 1) / seq;
  out.from = "'" + spec.path + "' (" + std::string(token_dtype_name(*dtype)) + ", " + std::to_string(n) + " tokens)";
  const int64_t used = c.rows_needed(out.size) * seq + 1;  // ids any loaded sample can touch

  // One scan of the ids both fields share ([1, used - 1)), plus each field's own end id.
  file->advise_sequential(true);
  const TokenRange inner = token_range(*file, 1, used - 1);
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    const DatasetInput& in = c.inputs[k];
    const bool targets = c.field_of[k] == "targets";
    const int64_t begin = targets ? 1 : 0, end = targets ? used : used - 1;
    const int64_t edge = file->at(targets ? used - 1 : 0);
    const int64_t lo = std::min(inner.min, edge), hi = std::max(inner.max, edge);
    int64_t bound = in.int_bound > 0 ? in.int_bound : std::numeric_limits<int64_t>::max();
    if (in.sample.dtype == DType::i32) bound = std::min<int64_t>(bound, int64_t{1} << 31);
    if (lo >= 0 && hi < bound) {
      out.readers.push_back(std::make_unique<TokenReader>(file, begin, seq, in.sample.dtype));
      continue;
    }
    const int64_t at = first_token_outside(*file, begin, end, 0, bound);
    BRAID_ASSERT(at >= 0, "token scan found ", lo, "..", hi, " but no id outside [0, ", bound, ")");
    const int64_t id = file->at(at);
    const std::string range = in.int_bound > 0 ? "outside the vocabulary [0, " + std::to_string(in.int_bound) + ")"
                                               : "outside what i32 input '" + in.name + "' holds";
    if (id < 0)
      c.fail("token file '" + spec.path + "' holds the negative id " + std::to_string(id) + " at token " +
                 std::to_string(at) + " (0-based), " + range + " of input '" + in.name + "'",
             "is `dtype` right? an i32 file read as u32 or a u32 file as i32 shows such ids");
    c.fail("token file '" + spec.path + "' holds id " + std::to_string(id) + " at token " + std::to_string(at) +
               " (0-based), " + range + " of input '" + in.name + "'" +
               (c.field_of[k] != in.name ? " (field " + c.field_of[k] + ")" : ""),
           "its largest id is " + std::to_string(hi) + ": a vocabulary of at least " +
               std::to_string(hi + 1) + " takes it (the model's vocab var, e.g. `vars: {vocab: " +
               std::to_string(hi + 1) + "}` in the run file), or is `dtype` wrong?");
  }
  file->advise_sequential(false);
  return out;
}

}  // namespace braid::io::data
