// Internal interface between open_dataset (binding, limit, batch assembly; dataset.cpp) and the per-format
// loaders (one file each in this folder). A loader gets the binding already decided and returns one
// FieldReader per model input that writes a sample straight into the input's dtype; all format-specific
// checks (magic numbers, shapes, value ranges) happen at load, so reading a batch cannot fail.
// Not a plugin system: the formats are listed explicitly in dataset.cpp.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/dataset.h"

namespace braid::io::data {

// Writes sample `i` of one bound field to `dst`: the input's per-sample element count, in its dtype.
// Must be safe to call from several threads at once (readers hold immutable data).
class FieldReader {
 public:
  virtual ~FieldReader() = default;
  virtual void write(int64_t i, void* dst) const = 0;
};

struct LoadContext {
  const DataSourceSpec& spec;
  const std::vector<DatasetInput>& inputs;
  const std::vector<std::string>& field_of;  // field_of[k]: the field bound to input k
  uint64_t seed;

  // A UserError at the data source's place in the run file; `msg` names the data file.
  [[noreturn]] void fail(const std::string& msg, const std::string& hint = "") const;
  // Sample count to load: min(available, spec.limit) when a limit is set.
  int64_t rows_needed(int64_t available) const {
    return spec.limit > 0 && spec.limit < available ? spec.limit : available;
  }
};

struct Loaded {
  int64_t size = 0;                                   // samples available (before `limit`)
  std::vector<std::unique_ptr<FieldReader>> readers;  // one per model input, in input order
  std::string from;                                   // where the data comes from, for describe()
};

// Bytes (u8) sample i = base[offset + i * stride, + numel), converted to `dtype` and divided by `divisor`
// when floating (idx images: 255). The owner keeps `base` alive.
std::unique_ptr<FieldReader> make_u8_reader(std::shared_ptr<const void> owner, const uint8_t* base, int64_t offset,
                                            int64_t stride, int64_t numel, DType dtype, double divisor = 1);
// Rows of a tensor [N, sample...] already in the input's dtype: a memcpy per sample.
std::unique_ptr<FieldReader> make_tensor_reader(Tensor rows);

// Fails unless every value of `v[0, n)` lies in [0, bound) of input k; no check when the bound is unknown.
// `numel` (values per sample) turns the first bad index into a sample number for the message.
template <typename T>
void check_int_range(const LoadContext& c, size_t k, const std::string& source, const T* v, int64_t n,
                     int64_t numel) {
  int64_t bound = c.inputs[k].int_bound;
  if (bound <= 0) return;
  for (int64_t j = 0; j < n; ++j) {
    if (v[j] >= 0 && static_cast<int64_t>(v[j]) < bound) continue;
    c.fail(source + " holds " + std::to_string(static_cast<long long>(v[j])) + " at sample " +
               std::to_string(j / numel) + ", outside [0, " + std::to_string(bound) + ") of input '" +
               c.inputs[k].name + "'",
           "integer inputs index something of that size (an embedding's num, a loss's classes)");
  }
}

// The formats. `*_fields` names the fields a source provides (before binding); `load_*` reads it.
std::vector<std::string> idx_fields(const DataSourceSpec& spec);
Loaded load_idx(const LoadContext& c);
std::vector<std::string> hdf5_fields(const DataSourceSpec& spec);
Loaded load_hdf5(const LoadContext& c);
std::vector<std::string> bytes_fields(const DataSourceSpec& spec);
Loaded load_bytes(const LoadContext& c);
std::vector<std::string> tokens_fields(const DataSourceSpec& spec);
Loaded load_tokens(const LoadContext& c);
Loaded load_synthetic(const LoadContext& c);  // its fields are the model inputs themselves

}  // namespace braid::io::data
