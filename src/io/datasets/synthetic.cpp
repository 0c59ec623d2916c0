// The synthetic format: `samples` random samples of every model input, for smoke tests and benchmarks.
// Floats are normal(0, 1); integers uniform in [0, int_bound). Sample i of input k is a pure function of
// (seed, k, i) through a counter-based stream, so it does not depend on which other samples were read,
// in which order, or on how many devices read them. Sets of up to 256 MiB are drawn once when opened (so
// benchmarks time the model, not the random number generator); larger ones are drawn on every read.
#include <cstring>
#include <vector>

#include "core/rng.h"
#include "io/datasets/source.h"

namespace braid::io::data {

namespace {

constexpr uint64_t kSyntheticStream = 0x53594e5448ULL;  // "SYNTH"

class SyntheticReader final : public FieldReader {
 public:
  SyntheticReader(uint64_t key, int64_t numel, DType dtype, int64_t bound, int64_t samples)
      : key_(key), numel_(numel), dtype_(dtype), bound_(bound) {
    const size_t sample_bytes = static_cast<size_t>(numel) * dtype_size(dtype);
    if (sample_bytes * static_cast<size_t>(samples) <= kCacheLimit) {
      std::vector<char> cache(sample_bytes * static_cast<size_t>(samples));
      for (int64_t i = 0; i < samples; ++i) draw(i, cache.data() + static_cast<size_t>(i) * sample_bytes);
      cache_ = std::move(cache);
    }
  }

  void write(int64_t i, void* dst) const override {
    const size_t sample_bytes = static_cast<size_t>(numel_) * dtype_size(dtype_);
    if (!cache_.empty()) {
      std::memcpy(dst, cache_.data() + static_cast<size_t>(i) * sample_bytes, sample_bytes);
      return;
    }
    draw(i, dst);
  }

 private:
  static constexpr size_t kCacheLimit = size_t{256} << 20;

  void draw(int64_t i, void* dst) const {
    Rng rng(key_, static_cast<uint64_t>(i));
    for (int64_t j = 0; j < numel_; ++j) {
      switch (dtype_) {
        case DType::f32: static_cast<float*>(dst)[j] = static_cast<float>(rng.normal()); break;
        case DType::f64: static_cast<double*>(dst)[j] = rng.normal(); break;
        case DType::i32: static_cast<int32_t*>(dst)[j] = static_cast<int32_t>(rng.below(static_cast<uint64_t>(bound_))); break;
        case DType::i64: static_cast<int64_t*>(dst)[j] = static_cast<int64_t>(rng.below(static_cast<uint64_t>(bound_))); break;
        default: BRAID_ASSERT(false, "synthetic ", dtype_name(dtype_));
      }
    }
  }

  uint64_t key_;
  int64_t numel_;
  DType dtype_;
  int64_t bound_;
  std::vector<char> cache_;  // every sample, drawn once (empty when the set is too large)
};

}  // namespace

Loaded load_synthetic(const LoadContext& c) {
  if (c.spec.samples <= 0) c.fail("synthetic data needs samples > 0, got " + std::to_string(c.spec.samples));
  Diagnostics diags;
  for (const auto& in : c.inputs) {
    if (is_int(in.sample.dtype) && in.int_bound <= 0)
      diags.error(c.spec.loc, "synthetic data cannot tell the range of integer input '" + in.name + "'",
                  "integers are drawn below the bound their consumer sets (an embedding's num, a loss's classes); "
                  "feed '" + in.name + "' to such a layer or use real data");
    if (is_int(in.sample.dtype) && in.sample.dtype == DType::i32 && in.int_bound > (int64_t{1} << 31))
      diags.error(c.spec.loc, "integer input '" + in.name + "' is i32 but its values reach " + std::to_string(in.int_bound));
  }
  diags.throw_if_any();
  Loaded out;
  out.size = c.spec.samples;
  out.from = "seed " + std::to_string(c.seed);
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    const DatasetInput& in = c.inputs[k];
    uint64_t key = hash_key(c.seed, kSyntheticStream + k);
    out.readers.push_back(std::make_unique<SyntheticReader>(key, in.sample.numel(), in.sample.dtype, in.int_bound,
                                                               c.spec.samples));
  }
  return out;
}

}  // namespace braid::io::data
