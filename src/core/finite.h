// Non-finite values (NaN, +-Inf) in tensors: loaded checkpoints, data and `braid inspect` name the tensor
// (or sample) that holds one, instead of training on it silently. Integer tensors are always finite.
#pragma once
#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace braid {

struct NonFinite {
  int64_t count = 0;   // NaN and +-Inf elements
  int64_t nan = 0;     // of which NaN
  int64_t first = -1;  // flat index of the first one (-1: none)
  double first_value = 0;
};

// Scans every element of `t` (f32, f64, bf16, f16; integers count none). A whole pass, vectorised.
NonFinite find_non_finite(const Tensor& t);
// "NaN", "+Inf" or "-Inf" (or the number, when finite).
std::string non_finite_name(double v);
// "3 non-finite value(s) (2 NaN; the first, +Inf, at element 17)"
std::string describe(const NonFinite& nf);

}  // namespace braid
