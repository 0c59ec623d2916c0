// open_dataset: picks the format, binds its fields to the model inputs, applies `limit`, and assembles
// batches from the per-format readers; plus the shared readers and the BatchSampler. Every user mistake
// found while binding is reported together; read() only copies and checks the caller's tensors.
#include "io/dataset.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "core/rng.h"
#include "io/datasets/source.h"

namespace braid::io {

namespace data {

void LoadContext::fail(const std::string& msg, const std::string& hint) const {
  throw UserError(spec.loc, msg, hint);
}

namespace {

class U8Reader final : public FieldReader {
 public:
  U8Reader(std::shared_ptr<const void> owner, const uint8_t* base, int64_t offset, int64_t stride, int64_t numel,
           DType dtype, double divisor)
      : owner_(std::move(owner)), base_(base), offset_(offset), stride_(stride), numel_(numel), dtype_(dtype),
        divisor_(divisor) {}

  void write(int64_t i, void* dst) const override {
    const uint8_t* src = base_ + offset_ + i * stride_;
    switch (dtype_) {
      case DType::f32: {
        auto* d = static_cast<float*>(dst);
        const auto div = static_cast<float>(divisor_);
        for (int64_t j = 0; j < numel_; ++j) d[j] = static_cast<float>(src[j]) / div;
        break;
      }
      case DType::f64: {
        auto* d = static_cast<double*>(dst);
        for (int64_t j = 0; j < numel_; ++j) d[j] = static_cast<double>(src[j]) / divisor_;
        break;
      }
      case DType::i32: {
        auto* d = static_cast<int32_t*>(dst);
        for (int64_t j = 0; j < numel_; ++j) d[j] = src[j];
        break;
      }
      case DType::i64: {
        auto* d = static_cast<int64_t*>(dst);
        for (int64_t j = 0; j < numel_; ++j) d[j] = src[j];
        break;
      }
      default: BRAID_ASSERT(false, "u8 reader into ", dtype_name(dtype_));
    }
  }

 private:
  std::shared_ptr<const void> owner_;
  const uint8_t* base_;
  int64_t offset_, stride_, numel_;
  DType dtype_;
  double divisor_;
};

class TensorReader final : public FieldReader {
 public:
  explicit TensorReader(Tensor rows)
      : rows_(std::move(rows)), row_bytes_(rows_.shape()[0] ? rows_.bytes() / static_cast<size_t>(rows_.shape()[0]) : 0) {}
  void write(int64_t i, void* dst) const override {
    std::memcpy(dst, static_cast<const char*>(rows_.raw()) + static_cast<size_t>(i) * row_bytes_, row_bytes_);
  }

 private:
  Tensor rows_;
  size_t row_bytes_;
};

}  // namespace

std::unique_ptr<FieldReader> make_u8_reader(std::shared_ptr<const void> owner, const uint8_t* base, int64_t offset,
                                            int64_t stride, int64_t numel, DType dtype, double divisor) {
  return std::make_unique<U8Reader>(std::move(owner), base, offset, stride, numel, dtype, divisor);
}

std::unique_ptr<FieldReader> make_tensor_reader(Tensor rows) { return std::make_unique<TensorReader>(std::move(rows)); }

}  // namespace data

namespace {

const std::vector<std::string> kFormats = {"idx", "hdf5", "bytes", "tokens", "synthetic"};

std::string join_names(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) s += (i ? ", " : "") + names[i];
  return s.empty() ? "(none)" : s;
}

// field_of[k] = the field bound to input k: `bind` first, then the remaining fields in order.
std::vector<std::string> bind_fields(const DataSourceSpec& spec, const std::vector<std::string>& fields,
                                     const std::vector<DatasetInput>& inputs, Diagnostics& diags) {
  std::vector<std::string> input_names;
  for (const auto& in : inputs) input_names.push_back(in.name);
  std::vector<std::string> field_of(inputs.size());
  std::vector<bool> field_used(fields.size(), false);
  auto index_of = [](const std::vector<std::string>& v, const std::string& x) {
    return static_cast<size_t>(std::find(v.begin(), v.end(), x) - v.begin());
  };
  for (const auto& [f, in] : spec.bind) {
    size_t fi = index_of(fields, f), ii = index_of(input_names, in);
    if (fi == fields.size()) {
      diags.error(spec.loc, "bind: " + spec.format + " data has no field '" + f + "' (fields: " + join_names(fields) + ")",
                  did_you_mean_hint(f, fields));
      continue;
    }
    if (ii == inputs.size()) {
      diags.error(spec.loc, "bind: the model has no input '" + in + "' (inputs: " + join_names(input_names) + ")",
                  did_you_mean_hint(in, input_names));
      continue;
    }
    if (field_used[fi]) {
      diags.error(spec.loc, "bind: field '" + f + "' is bound twice");
      continue;
    }
    if (!field_of[ii].empty()) {
      diags.error(spec.loc, "bind: input '" + in + "' gets both '" + field_of[ii] + "' and '" + f + "'");
      continue;
    }
    field_used[fi] = true;
    field_of[ii] = f;
  }
  size_t next_input = 0;
  for (size_t fi = 0; fi < fields.size(); ++fi) {
    if (field_used[fi]) continue;
    while (next_input < inputs.size() && !field_of[next_input].empty()) ++next_input;
    if (next_input == inputs.size()) {
      diags.error(spec.loc, "field '" + fields[fi] + "' of the " + spec.format + " data feeds no model input (inputs: " +
                                join_names(input_names) + ")",
                  "bind it with `bind: {" + fields[fi] + ": <input>}` or remove it");
      continue;
    }
    field_used[fi] = true;
    field_of[next_input] = fields[fi];
  }
  for (size_t k = 0; k < inputs.size(); ++k)
    if (field_of[k].empty())
      diags.error(spec.loc, "model input '" + inputs[k].name + "' gets no data: the " + spec.format +
                                " source provides " + join_names(fields));
  return field_of;
}

class BoundDataset final : public Dataset {
 public:
  BoundDataset(std::vector<DatasetInput> inputs, data::Loaded loaded, int64_t size, std::string description)
      : inputs_(std::move(inputs)), loaded_(std::move(loaded)), size_(size), description_(std::move(description)) {}

  int64_t size() const override { return size_; }
  std::string describe() const override { return description_; }

  void read(std::span<const int64_t> indices, std::span<Tensor> out) const override {
    BRAID_ASSERT(out.size() == inputs_.size(), "dataset read into ", out.size(), " tensors, model has ", inputs_.size(),
                 " inputs");
    const auto n = static_cast<int64_t>(indices.size());
    for (int64_t i : indices) BRAID_ASSERT(i >= 0 && i < size_, "sample index ", i, " outside [0, ", size_, ")");
    for (size_t k = 0; k < inputs_.size(); ++k) {
      const TensorDesc& s = inputs_[k].sample;
      const Shape& o = out[k].shape();
      bool ok = out[k].dtype() == s.dtype && o.rank() == s.shape.rank() + 1 && o[0] == n;
      for (int a = 0; ok && a < s.shape.rank(); ++a) ok = o[a + 1] == s.shape[a];
      BRAID_ASSERT(ok, "batch tensor for input '", inputs_[k].name, "' is ", out[k].desc().str(), ", expected ",
                   dtype_name(s.dtype), " [", n, ", ...", s.shape.str(), "]");
      auto* dst = static_cast<char*>(out[k].raw());
      const size_t row = s.bytes();
      for (int64_t j = 0; j < n; ++j) loaded_.readers[k]->write(indices[static_cast<size_t>(j)], dst + static_cast<size_t>(j) * row);
    }
  }

 private:
  std::vector<DatasetInput> inputs_;
  data::Loaded loaded_;
  int64_t size_;
  std::string description_;
};

std::unique_ptr<Dataset> open_impl(const DataSourceSpec& spec, const std::vector<DatasetInput>& inputs, uint64_t seed) {
  Diagnostics diags;
  if (inputs.empty()) diags.error(spec.loc, "the model has no inputs to feed");
  for (const auto& in : inputs)
    if (in.sample.dtype == DType::bf16 || in.sample.dtype == DType::f16)
      diags.error(spec.loc, "model input '" + in.name + "' is " + std::string(dtype_name(in.sample.dtype)) +
                                "; data sources fill f32, f64, i32 or i64 inputs",
                  "declare the input f32; mixed precision is set by train.precision");
  if (spec.limit < 0) diags.error(spec.loc, "limit must be positive, got " + std::to_string(spec.limit));

  std::vector<std::string> fields;
  data::Loaded (*load)(const data::LoadContext&) = nullptr;
  if (spec.format == "idx") {
    fields = data::idx_fields(spec), load = data::load_idx;
  } else if (spec.format == "hdf5") {
    fields = data::hdf5_fields(spec), load = data::load_hdf5;
  } else if (spec.format == "bytes") {
    fields = data::bytes_fields(spec), load = data::load_bytes;
  } else if (spec.format == "tokens") {
    fields = data::tokens_fields(spec), load = data::load_tokens;
  } else if (spec.format == "synthetic") {
    for (const auto& in : inputs) fields.push_back(in.name);
    load = data::load_synthetic;
    if (!spec.bind.empty()) diags.error(spec.loc, "synthetic data is generated per model input; it takes no `bind`");
  } else {
    diags.error(spec.loc, "unknown data format '" + spec.format + "' (formats: " + join_names(kFormats) + ")",
                did_you_mean_hint(spec.format, kFormats));
  }
  if (load && fields.empty() && spec.format != "synthetic")
    diags.error(spec.loc, spec.format == "hdf5"  ? "hdf5 data needs `fields` ({name: /dataset, ...})"
                          : spec.format == "idx" ? "idx data needs `images` and/or `labels`"
                                                 : spec.format + " data provides no fields");
  diags.throw_if_any();
  std::vector<std::string> field_of = bind_fields(spec, fields, inputs, diags);
  diags.throw_if_any();

  data::LoadContext ctx{spec, inputs, field_of, seed};
  data::Loaded loaded = load(ctx);
  BRAID_ASSERT(loaded.readers.size() == inputs.size(), spec.format, " loader returned ", loaded.readers.size(), " readers");
  int64_t size = ctx.rows_needed(loaded.size);
  if (size <= 0) ctx.fail(spec.format + " data from " + loaded.from + " has no samples");

  std::string desc = spec.format + ": " + std::to_string(size) + " samples";
  if (size < loaded.size) desc += " (limit; " + std::to_string(loaded.size) + " available)";
  desc += " from " + loaded.from + ";";
  for (size_t k = 0; k < inputs.size(); ++k)
    desc += (k ? ", " : " ") + field_of[k] + " -> " + inputs[k].name + " " + inputs[k].sample.str();
  return std::make_unique<BoundDataset>(inputs, std::move(loaded), size, desc);
}

}  // namespace

std::unique_ptr<Dataset> open_dataset(const DataSourceSpec& spec, const std::vector<DatasetInput>& inputs,
                                      uint64_t seed) {
  try {
    return open_impl(spec, inputs, seed);
  } catch (const UserError& e) {
    // Errors from shared helpers (paths, HDF5) carry no run-file place: give them the data source's.
    if (!spec.loc.valid()) throw;
    std::vector<Diagnostic> diags = e.diagnostics();
    for (auto& d : diags)
      if (!d.loc.valid()) d.loc = spec.loc;
    throw UserError(std::move(diags));
  }
}

// ---- BatchSampler ----

namespace {
constexpr uint64_t kSamplerStream = 0x53414d504c4552ULL;  // "SAMPLER"
}

BatchSampler::BatchSampler(int64_t dataset_size, int64_t batch, bool shuffle, uint64_t seed, bool drop_last)
    : size_(dataset_size), batch_(batch), shuffle_(shuffle), drop_last_(drop_last), seed_(seed) {
  BRAID_ASSERT(batch > 0, "batch ", batch);
  BRAID_ASSERT(dataset_size > 0, "dataset size ", dataset_size);
  if (drop_last && dataset_size < batch)
    throw UserError(SourceLoc{}, "the dataset has " + std::to_string(dataset_size) +
                                     " samples, fewer than one batch of " + std::to_string(batch),
                    "use a smaller train.batch or more data");
  order_.resize(static_cast<size_t>(size_));
  make_order();
}

int64_t BatchSampler::batches_per_epoch() const { return drop_last_ ? size_ / batch_ : (size_ + batch_ - 1) / batch_; }

void BatchSampler::make_order() {
  std::iota(order_.begin(), order_.end(), int64_t{0});
  if (!shuffle_) return;
  Rng rng(hash_key(seed_, kSamplerStream), static_cast<uint64_t>(epoch_));
  for (int64_t i = size_ - 1; i > 0; --i) {  // Fisher-Yates
    auto j = static_cast<int64_t>(rng.below(static_cast<uint64_t>(i) + 1));
    std::swap(order_[static_cast<size_t>(i)], order_[static_cast<size_t>(j)]);
  }
}

std::span<const int64_t> BatchSampler::next_view() {
  if (position_ >= size_ || (drop_last_ && position_ + batch_ > size_)) {
    ++epoch_;
    position_ = 0;
    make_order();
  }
  int64_t n = std::min(batch_, size_ - position_);
  std::span<const int64_t> view(order_.data() + position_, static_cast<size_t>(n));
  position_ += n;
  return view;
}

std::vector<int64_t> BatchSampler::next() {
  std::span<const int64_t> v = next_view();
  return std::vector<int64_t>(v.begin(), v.end());
}

void BatchSampler::restore(int64_t epoch, int64_t position) {
  if (epoch < 0 || position < 0 || position > size_)
    throw UserError(SourceLoc{}, "cannot resume the data order at epoch " + std::to_string(epoch) + ", sample " +
                                     std::to_string(position) + ": the dataset has " + std::to_string(size_) + " samples",
                    "did the data (or its limit) change since the checkpoint was written?");
  epoch_ = epoch;
  position_ = position;
  make_order();
}

}  // namespace braid::io
