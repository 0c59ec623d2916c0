// Scans for non-finite values; see finite.h.
#include "core/finite.h"

#include <cmath>

namespace braid {
namespace {

template <typename T>
NonFinite scan(const T* x, int64_t n) {
  NonFinite r;
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) bad += !std::isfinite(x[i]);  // the common case: one branch-free pass
  if (bad == 0) return r;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isfinite(x[i])) continue;
    if (r.first < 0) {
      r.first = i;
      r.first_value = static_cast<double>(x[i]);
    }
    ++r.count;
    r.nan += std::isnan(x[i]);
  }
  return r;
}

}  // namespace

NonFinite find_non_finite(const Tensor& t) {
  switch (t.dtype()) {
    case DType::f32: return scan(t.data<float>(), t.numel());
    case DType::f64: return scan(t.data<double>(), t.numel());
    case DType::bf16:
    case DType::f16: {
      Tensor f = Tensor::empty(TensorDesc{t.shape(), DType::f32});
      convert_float(t, f);
      return scan(f.data<float>(), f.numel());
    }
    default: return {};
  }
}

std::string non_finite_name(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return std::to_string(v);
}

std::string describe(const NonFinite& nf) {
  return std::to_string(nf.count) + " non-finite value(s) (" + std::to_string(nf.nan) + " NaN; the first, " +
         non_finite_name(nf.first_value) + ", at element " + std::to_string(nf.first) + ")";
}

}  // namespace braid
