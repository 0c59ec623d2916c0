// The bytes format: a text file as byte tokens for character-level language models. Sample i is the
// window bytes [i*seq, i*seq + seq) as `tokens` and the next bytes [i*seq + 1, i*seq + seq + 1) as
// `targets`; there are (length - 1) / seq samples (windows do not overlap; the tail is unused).
// Both fields are integer inputs of shape [seq]. No tokenizer, no encoding checks: bytes are bytes.
#include "io/datasets/source.h"
#include "io/paths.h"

namespace braid::io::data {

std::vector<std::string> bytes_fields(const DataSourceSpec&) { return {"tokens", "targets"}; }

Loaded load_bytes(const LoadContext& c) {
  const DataSourceSpec& spec = c.spec;
  if (spec.path.empty()) c.fail("bytes data needs a `path` (a text file)");
  if (spec.seq < 0) c.fail("bytes data: seq must be positive, got " + std::to_string(spec.seq));
  int64_t seq = spec.seq;
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    const DatasetInput& in = c.inputs[k];
    if (!is_int(in.sample.dtype) || in.sample.shape.rank() != 1)
      c.fail("bytes data fills '" + c.field_of[k] + "' with byte tokens [seq], but input '" + in.name + "' is " +
                 in.sample.str(),
             "declare it {shape: [seq], dtype: i32}");
    if (seq == 0) seq = in.sample.shape[0];  // seq unset: the model's input length
    if (in.sample.shape[0] != seq)
      c.fail("bytes data from '" + spec.path + "' has windows of seq " + std::to_string(seq) + " but input '" + in.name +
             "' has shape " + in.sample.shape.str(), "seq must equal the model's input length");
  }
  std::shared_ptr<const std::string> text;
  try {
    text = std::make_shared<const std::string>(read_file(spec.path));
  } catch (const UserError& e) {
    c.fail("bytes file '" + spec.path + "': " + e.diagnostics().front().message);
  }
  const auto len = static_cast<int64_t>(text->size());
  if (len < seq + 1)
    c.fail("bytes file '" + spec.path + "' has " + std::to_string(len) + " bytes; one window of seq " +
           std::to_string(seq) + " needs at least " + std::to_string(seq + 1));
  Loaded out;
  out.size = (len - 1) / seq;
  out.from = spec.path;
  const auto* base = reinterpret_cast<const uint8_t*>(text->data());
  const int64_t used = c.rows_needed(out.size) * seq + 1;  // bytes any loaded sample can touch
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    const bool targets = c.field_of[k] == "targets";
    const int64_t off = targets ? 1 : 0;
    check_int_range(c, k, "bytes file '" + spec.path + "' (" + c.field_of[k] + ")", base + off, used - 1, seq);
    out.readers.push_back(make_u8_reader(text, base, off, seq, seq, c.inputs[k].sample.dtype));
  }
  return out;
}

}  // namespace braid::io::data
