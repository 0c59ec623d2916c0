// Small statistics over measurements (calibration, the trainer's closed loop).
#pragma once
#include <algorithm>
#include <vector>

namespace braid {

// The median of xs: the mean of the middle two for an even count; 0 for none.
inline double median(std::vector<double> xs) {
  if (xs.empty()) return 0;
  std::sort(xs.begin(), xs.end());
  const size_t k = xs.size() / 2;
  return xs.size() % 2 ? xs[k] : (xs[k - 1] + xs[k]) / 2;
}

}  // namespace braid
