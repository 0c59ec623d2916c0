// Shared by the conv, pool and batch_norm families: NCHW shape checks whose messages speak of per-sample
// shapes (what the user wrote in the model file), and the window geometry of conv2d and the 2-D pools
// (PyTorch's floor formula: Ho = (H + 2 ph - kh) / sh + 1, no dilation, no ceil mode).
// Header-only and internal to src/ops/defs; it knows nothing of any one op.
#pragma once
#include <cmath>
#include <string>
#include <vector>

#include "ops/op_def.h"

namespace braid::ops::spatial {

// The shape of one sample: the graph shape without its batch axis.
inline Shape per_sample(const Shape& s) {
  if (s.rank() == 0) return s;
  return Shape(std::vector<int64_t>(s.dims().begin() + 1, s.dims().end()));
}

inline std::string pair_str(const std::vector<int64_t>& v) {
  return "[" + std::to_string(v[0]) + ", " + std::to_string(v[1]) + "]";
}

// A hint that turns a per-sample shape into [C, H, W]: [784] -> [1, 28, 28], [3072] -> [3, 32, 32],
// [H, W] -> [1, H, W].
inline std::string reshape_hint(const Shape& sample) {
  auto square = [](int64_t n) -> int64_t {
    auto r = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(n))));
    return r > 0 && r * r == n ? r : 0;
  };
  auto suggest = [](int64_t c, int64_t h, int64_t w) {
    return "add a reshape: {op: reshape, shape: [" + std::to_string(c) + ", " + std::to_string(h) + ", " +
           std::to_string(w) + "]}";
  };
  if (sample.rank() == 1) {
    if (int64_t s = square(sample[0])) return suggest(1, s, s);
    if (sample[0] % 3 == 0)
      if (int64_t s = square(sample[0] / 3)) return suggest(3, s, s);
  }
  if (sample.rank() == 2) return suggest(1, sample[0], sample[1]);
  return "samples need 3 axes: channels, height, width (NCHW)";
}

// x must be a floating [B, C, H, W] tensor; the message names the per-sample shape.
inline void require_chw(const std::string& op, const TensorDesc& x) {
  if (x.shape.rank() != 4) {
    Shape s = per_sample(x.shape);
    throw OpError(op + " needs [C, H, W] samples, got " + s.str(), reshape_hint(s));
  }
  if (!is_float(x.dtype))
    throw OpError(op + " needs floating point input, got " + std::string(dtype_name(x.dtype)) + " samples " +
                  per_sample(x.shape).str());
}

struct Window {
  int64_t B = 0, C = 0, H = 0, W = 0;
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0;
  int64_t Ho = 0, Wo = 0;
  int64_t k() const { return kh * kw; }
  int64_t in_plane() const { return H * W; }
  int64_t out_plane() const { return Ho * Wo; }
};

// Geometry of a kernel/stride/padding window over x [B, C, H, W]; throws OpError when the kernel does not
// fit the padded input (PyTorch: "Kernel size can't be greater than actual input size").
inline Window window_of(const std::string& op, const Attrs& a, const TensorDesc& x) {
  require_chw(op, x);
  const auto &k = a.ints("kernel"), &s = a.ints("stride"), &p = a.ints("padding");
  Window w;
  w.B = x.shape[0], w.C = x.shape[1], w.H = x.shape[2], w.W = x.shape[3];
  w.kh = k[0], w.kw = k[1], w.sh = s[0], w.sw = s[1], w.ph = p[0], w.pw = p[1];
  const int64_t padded_h = size_add(w.H, size_mul(2, w.ph)), padded_w = size_add(w.W, size_mul(2, w.pw));
  (void)size_mul(w.kh, w.kw);  // the kernel's taps, a size in the kernels
  if (padded_h < w.kh || padded_w < w.kw)
    throw OpError("kernel " + pair_str(k) + " is larger than the padded input: per-sample input " +
                      per_sample(x.shape).str() + " with padding " + pair_str(p) + " is " +
                      std::to_string(padded_h) + " x " + std::to_string(padded_w),
                  "use a smaller kernel or more padding");
  w.Ho = (padded_h - w.kh) / w.sh + 1;
  w.Wo = (padded_w - w.kw) / w.sw + 1;
  return w;
}

inline AttrSpec pair_attr(const std::string& name, std::optional<int64_t> dflt, bool positive, std::string doc) {
  AttrSpec s;
  s.name = name;
  s.kind = AttrKind::Ints;
  if (dflt) s.default_value = AttrValue(std::vector<int64_t>{*dflt, *dflt});
  s.list_len = 2;
  s.positive = positive;
  s.non_negative = !positive;
  s.doc = std::move(doc);
  return s;
}

}  // namespace braid::ops::spatial
