// Data-movement ops on per-sample shapes: concat (n-ary along a per-sample axis), flatten ([B, ...] ->
// [B, prod]), reshape (per-sample `shape`, one -1 allowed), transpose (permutation of the per-sample axes),
// and the internal slice (axis, start, length) that concat's gradient emits. PyTorch's torch.cat,
// nn.Flatten, Tensor.reshape(B, *shape) and Tensor.permute(0, *[p + 1 for p in perm]).
// Attributes naming axes are per-sample (the batch axis is never named); kernels copy bytes, so every
// dtype works (integer ids too). Reshape and flatten copy; the executor may later alias them instead.
#include <cstring>
#include <numeric>

#include "ops/cpu/kernel_util.h"
#include "ops/registry.h"

namespace braid::ops {
namespace {

Shape per_sample(const Shape& s) { return Shape(std::vector<int64_t>(s.dims().begin() + 1, s.dims().end())); }

// Per-sample axis (negative counts from the end) -> graph axis; OpError when out of range.
int graph_axis(int64_t axis, const Shape& s, const std::string& attr) {
  int r = s.rank() - 1;
  if (axis < -r || axis >= r)
    throw OpError("attribute '" + attr + "' is " + std::to_string(axis) + " but the per-sample shape " +
                      per_sample(s).str() + " has " + std::to_string(r) + " axes",
                  r > 0 ? "per-sample axes are 0.." + std::to_string(r - 1) + " or -" + std::to_string(r) +
                              "..-1; the batch axis is never named"
                        : "a per-sample scalar has no axis to name");
  return static_cast<int>(axis < 0 ? axis + r : axis) + 1;
}

Cost copy_cost(const Attrs&, std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
  return default_cost(in, out, 0);  // pure data movement
}

void copy_cpu(const KernelCtx&, const Attrs&, std::span<const Tensor> in, std::span<const Tensor> out) {
  BRAID_ASSERT(in[0].bytes() == out[0].bytes(), in[0].desc().str(), " -> ", out[0].desc().str());
  if (in[0].bytes()) std::memcpy(out[0].raw(), in[0].raw(), in[0].bytes());
}

// Gradient of flatten and reshape: reshape dy back to the input's per-sample shape.
void reshape_back_rule(GradCtx& c) {
  if (!c.dout[0].valid() || !c.needs[0]) return;
  Attrs a{{"shape", per_sample(c.g.desc(c.inputs[0]).shape).dims()}};
  c.din[0] = c.g.emit("reshape", a, {c.dout[0]})[0];
}

// ---- concat ------------------------------------------------------------------------------------------------
std::vector<TensorDesc> infer_concat(const Attrs& a, std::span<const TensorDesc> in) {
  const Shape& s0 = in[0].shape;
  int ax = graph_axis(a.i("axis"), s0, "axis");
  Shape out = s0;
  for (size_t k = 1; k < in.size(); ++k) {
    if (in[k].dtype != in[0].dtype)
      throw OpError("inputs have different dtypes: input 0 is " + in[0].str() + ", input " + std::to_string(k) +
                    " is " + in[k].str());
    const Shape& sk = in[k].shape;
    bool ok = sk.rank() == s0.rank();
    for (int i = 0; ok && i < s0.rank(); ++i) ok = i == ax || sk[i] == s0[i];
    if (!ok)
      throw OpError("input " + std::to_string(k) + " has per-sample shape " + per_sample(sk).str() +
                        " but input 0 has " + per_sample(s0).str() + "; concat along per-sample axis " +
                        std::to_string(ax - 1) + " needs every other size equal",
                    "check the 'axis' attribute and the layers in 'from'");
    out[ax] += sk[ax];
  }
  return {TensorDesc{out, in[0].dtype}};
}

// Byte-level: rows of (outer) copy each input's (dim_k * inner) block in turn.
void concat_cpu(const KernelCtx&, const Attrs& a, std::span<const Tensor> in, std::span<const Tensor> out) {
  const Shape& os = out[0].shape();
  int ax = graph_axis(a.i("axis"), os, "axis");
  auto es = static_cast<int64_t>(dtype_size(out[0].dtype()));
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < ax; ++i) outer *= os[i];
  for (int i = ax + 1; i < os.rank(); ++i) inner *= os[i];
  int64_t row = os[ax] * inner * es;
  auto* y = static_cast<char*>(out[0].raw());
  parallel_for(outer, std::max<int64_t>(1, 65536 / std::max<int64_t>(row, 1)), [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) {
      int64_t off = 0;
      for (const auto& t : in) {
        int64_t chunk = t.shape()[ax] * inner * es;
        const char* x = static_cast<const char*>(t.raw()) + o * chunk;
        if (chunk) std::memcpy(y + o * row + off, x, static_cast<size_t>(chunk));
        off += chunk;
      }
    }
  });
}

void concat_grad_rule(GradCtx& c) {
  if (!c.dout[0].valid()) return;
  const Shape& os = c.g.desc(c.dout[0]).shape;
  int ax = graph_axis(c.attrs.i("axis"), os, "axis");
  int64_t start = 0;
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    int64_t len = c.g.desc(c.inputs[k]).shape[ax];
    if (c.needs[k])
      c.din[k] = c.g.emit("slice", {{"axis", int64_t{ax - 1}}, {"start", start}, {"length", len}}, {c.dout[0]})[0];
    start += len;
  }
}

// S(a) on every operand along any axis but the concat axis (batch included): shards concatenate alike.
std::vector<SplitSignature> concat_splits(const Attrs& a, std::span<const TensorDesc> in,
                                          std::span<const TensorDesc> out) {
  int ax = graph_axis(a.i("axis"), out[0].shape, "axis");
  auto sigs = all_broadcast(in, out);
  for (int k = 0; k < out[0].shape.rank(); ++k)
    if (k != ax)
      sigs.push_back({k == 0 ? "data" : "split" + std::to_string(k), std::vector<Sbp>(in.size(), Sbp::S(k)),
                      {Sbp::S(k)}});
  return sigs;
}

std::vector<Sample> concat_samples() {
  return {{"two_last", {}, {{TensorDesc{Shape{2, 3, 4}}}, {TensorDesc{Shape{2, 3, 2}}}}},
          {"three_last", {{"axis", int64_t{-1}}},
           {{TensorDesc{Shape{3, 2}}}, {TensorDesc{Shape{3, 4}}}, {TensorDesc{Shape{3, 1}}}}},
          {"three_first", {{"axis", int64_t{0}}},
           {{TensorDesc{Shape{2, 1, 4}}}, {TensorDesc{Shape{2, 3, 4}}}, {TensorDesc{Shape{2, 2, 4}}}}},
          {"two_first", {{"axis", int64_t{0}}}, {{TensorDesc{Shape{2, 3}}}, {TensorDesc{Shape{2, 2}}}}}};
}
std::vector<BadSample> concat_bad() {
  return {{"sizes", {}, {TensorDesc{Shape{2, 3, 4}}, TensorDesc{Shape{2, 5, 4}}},
           "input 1 has per-sample shape [5, 4] but input 0 has [3, 4]"},
          {"rank", {}, {TensorDesc{Shape{2, 3, 4}}, TensorDesc{Shape{2, 4}}}, "needs every other size equal"},
          {"axis", {{"axis", int64_t{2}}}, {TensorDesc{Shape{2, 3, 4}}, TensorDesc{Shape{2, 3, 4}}},
           "'axis' is 2 but the per-sample shape [3, 4] has 2 axes"},
          {"dtype", {}, {TensorDesc{Shape{2, 3}}, TensorDesc{Shape{2, 3}, DType::f64}}, "different dtypes"}};
}

// ---- slice (internal) --------------------------------------------------------------------------------------
std::vector<TensorDesc> infer_slice(const Attrs& a, std::span<const TensorDesc> in) {
  int ax = graph_axis(a.i("axis"), in[0].shape, "axis");
  int64_t start = a.i("start"), len = a.i("length"), n = in[0].shape[ax];
  if (start + len > n)
    throw OpError("slice [" + std::to_string(start) + ", " + std::to_string(start + len) + ") of per-sample axis " +
                  std::to_string(ax - 1) + " exceeds its size " + std::to_string(n));
  Shape out = in[0].shape;
  out[ax] = len;
  return {TensorDesc{out, in[0].dtype}};
}

void slice_cpu(const KernelCtx&, const Attrs& a, std::span<const Tensor> in, std::span<const Tensor> out) {
  const Shape& is = in[0].shape();
  int ax = graph_axis(a.i("axis"), is, "axis");
  auto es = static_cast<int64_t>(dtype_size(in[0].dtype()));
  int64_t outer = 1, inner = 1, start = a.i("start"), len = a.i("length");
  for (int i = 0; i < ax; ++i) outer *= is[i];
  for (int i = ax + 1; i < is.rank(); ++i) inner *= is[i];
  int64_t chunk = len * inner * es, in_row = is[ax] * inner * es;
  const auto* x = static_cast<const char*>(in[0].raw());
  auto* y = static_cast<char*>(out[0].raw());
  parallel_for(outer, std::max<int64_t>(1, 65536 / std::max<int64_t>(chunk, 1)), [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o)
      if (chunk) std::memcpy(y + o * chunk, x + o * in_row + start * inner * es, static_cast<size_t>(chunk));
  });
}

// S(a) on input and output along any axis but the sliced one.
std::vector<SplitSignature> slice_splits(const Attrs& a, std::span<const TensorDesc> in,
                                         std::span<const TensorDesc> out) {
  int ax = graph_axis(a.i("axis"), in[0].shape, "axis");
  auto sigs = all_broadcast(in, out);
  for (int k = 0; k < in[0].shape.rank(); ++k)
    if (k != ax) sigs.push_back({k == 0 ? "data" : "split" + std::to_string(k), {Sbp::S(k)}, {Sbp::S(k)}});
  return sigs;
}

// ---- flatten -------------------------------------------------------------------------------------------------
std::vector<TensorDesc> infer_flatten(const Attrs&, std::span<const TensorDesc> in) {
  const Shape& s = in[0].shape;
  if (s.rank() < 2)
    throw OpError("flatten needs a per-sample shape with at least one axis, got the per-sample scalar of " +
                      in[0].str(),
                  "PyTorch's nn.Flatten flattens the axes after the batch; there are none here");
  return {TensorDesc{Shape{s[0], per_sample(s).numel()}, in[0].dtype}};
}

// data: S(0) -> S(0). first: S(1) -> S(1): a shard of the first per-sample axis is a contiguous block of
// each flattened row, and the blocks are in shard order.
std::vector<SplitSignature> flatten_splits(const Attrs&, std::span<const TensorDesc> in,
                                           std::span<const TensorDesc> out) {
  auto sigs = all_broadcast(in, out);
  sigs.push_back({"data", {Sbp::S(0)}, {Sbp::S(0)}});
  sigs.push_back({"first", {Sbp::S(1)}, {Sbp::S(1)}});
  return sigs;
}

std::vector<Sample> flatten_samples() {
  return {{"3d", {}, {{TensorDesc{Shape{2, 3, 4}}}}}, {"4d", {}, {{TensorDesc{Shape{3, 2, 2, 2}}}}}};
}
std::vector<BadSample> flatten_bad() {
  return {{"scalar_sample", {}, {TensorDesc{Shape{4}}}, "at least one axis"},
          {"scalar_sample_int", {}, {TensorDesc{Shape{2}, DType::i32}}, "per-sample scalar of i32[2]"}};
}

// ---- reshape -------------------------------------------------------------------------------------------------
std::vector<TensorDesc> infer_reshape(const Attrs& a, std::span<const TensorDesc> in) {
  Shape from = per_sample(in[0].shape);
  std::vector<int64_t> to = a.ints("shape");
  Shape asked(to);
  int infer_at = -1;
  int64_t known = 1;
  for (size_t i = 0; i < to.size(); ++i) {
    if (to[i] == -1) {
      if (infer_at >= 0)
        throw OpError("reshape 'shape' " + asked.str() + " has more than one -1", "at most one size may be inferred");
      infer_at = static_cast<int>(i);
    } else if (to[i] < 1) {
      throw OpError("reshape 'shape' " + asked.str() + " has size " + std::to_string(to[i]),
                    "sizes are at least 1, or -1 for the one size inferred from the others");
    } else if (__builtin_mul_overflow(known, to[i], &known)) {
      throw OpError("reshape 'shape' " + asked.str() + " has more elements than a 64-bit integer holds",
                    "shapes are per sample: the batch axis is not part of 'shape'");
    }
  }
  int64_t n = from.numel();
  bool fits = infer_at >= 0 ? n % known == 0 : n == known;
  if (!fits)
    throw OpError("cannot reshape per-sample shape " + from.str() + " (" + std::to_string(n) + " elements) to " +
                      asked.str() + (infer_at >= 0 ? " (the known sizes multiply to " : " (") +
                      std::to_string(known) + (infer_at >= 0 ? ", which does not divide it)" : " elements)"),
                  "shapes are per sample: the batch axis is not part of 'shape'");
  if (infer_at >= 0) to[static_cast<size_t>(infer_at)] = n / known;
  to.insert(to.begin(), in[0].shape[0]);
  return {TensorDesc{Shape(to), in[0].dtype}};
}

std::vector<SplitSignature> batch_only_splits(const Attrs&, std::span<const TensorDesc> in,
                                              std::span<const TensorDesc> out) {
  auto sigs = all_broadcast(in, out);
  sigs.push_back({"data", {Sbp::S(0)}, {Sbp::S(0)}});  // samples are reshaped independently
  return sigs;
}

std::vector<Sample> reshape_samples() {
  using V = std::vector<int64_t>;
  return {{"to_vector", {{"shape", V{-1}}}, {{TensorDesc{Shape{2, 3, 4}}}}},
          {"infer_last", {{"shape", V{3, -1}}}, {{TensorDesc{Shape{2, 12}}}}},
          {"explicit", {{"shape", V{2, 1, 3}}}, {{TensorDesc{Shape{3, 3, 2}}}}}};
}
std::vector<BadSample> reshape_bad() {
  using V = std::vector<int64_t>;
  return {{"count", {{"shape", V{5, 2}}}, {TensorDesc{Shape{2, 3, 4}}},
           "cannot reshape per-sample shape [3, 4] (12 elements) to [5, 2]"},
          {"count_infer", {{"shape", V{5, -1}}}, {TensorDesc{Shape{2, 12}}},
           "per-sample shape [12] (12 elements) to [5, -1]"},
          {"two_infer", {{"shape", V{-1, -1}}}, {TensorDesc{Shape{2, 12}}}, "more than one -1"},
          {"zero", {{"shape", V{0, 12}}}, {TensorDesc{Shape{2, 12}}}, "has size 0"}};
}

// ---- transpose -------------------------------------------------------------------------------------------------
// The graph-level permutation (batch axis fixed) of a per-sample `perm`; OpError unless a permutation.
std::vector<int> graph_perm(const std::vector<int64_t>& perm, const Shape& s) {
  int r = s.rank() - 1;
  std::vector<int> g{0};
  std::vector<bool> seen(static_cast<size_t>(std::max(r, 0)), false);
  bool ok = static_cast<int>(perm.size()) == r;
  for (size_t i = 0; ok && i < perm.size(); ++i) {
    int64_t p = perm[i] < 0 ? perm[i] + r : perm[i];
    ok = p >= 0 && p < r && !seen[static_cast<size_t>(p)];
    if (ok) {
      seen[static_cast<size_t>(p)] = true;
      g.push_back(static_cast<int>(p) + 1);
    }
  }
  if (!ok)
    throw OpError("transpose 'perm' " + Shape(perm).str() + " is not a permutation of the " + std::to_string(r) +
                      " axes of per-sample shape " + per_sample(s).str(),
                  "list each per-sample axis 0.." + std::to_string(r - 1) + " once; the batch axis stays first");
  return g;
}

std::vector<TensorDesc> infer_transpose(const Attrs& a, std::span<const TensorDesc> in) {
  auto g = graph_perm(a.ints("perm"), in[0].shape);
  Shape out = in[0].shape;
  for (size_t j = 0; j < g.size(); ++j) out[static_cast<int>(j)] = in[0].shape[g[j]];
  return {TensorDesc{out, in[0].dtype}};
}

// y[i_0, ..., i_r] = x at input axis g[j] = i_j. Rows of the output (all axes but the last) in parallel.
template <typename E>
void transpose_copy(const Tensor& x, const Tensor& y, const std::vector<int>& g) {
  const Shape &is = x.shape(), &os = y.shape();
  int r = os.rank();
  std::vector<int64_t> istride(static_cast<size_t>(r));
  int64_t s = 1;
  for (int i = r - 1; i >= 0; --i) {
    istride[static_cast<size_t>(i)] = s;
    s *= is[i];
  }
  std::vector<int64_t> ostep(static_cast<size_t>(r));  // input stride of each output axis
  for (int j = 0; j < r; ++j) ostep[static_cast<size_t>(j)] = istride[static_cast<size_t>(g[static_cast<size_t>(j)])];
  int64_t last = os[r - 1], rows = y.numel() / std::max<int64_t>(last, 1), step = ostep.back();
  const E* src = static_cast<const E*>(x.raw());
  E* dst = static_cast<E*>(y.raw());
  parallel_for(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(last, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t row = r0; row < r1; ++row) {
      int64_t off = 0, rem = row;
      for (int j = r - 2; j >= 0; --j) {
        off += (rem % os[j]) * ostep[static_cast<size_t>(j)];
        rem /= os[j];
      }
      E* d = dst + row * last;
      for (int64_t k = 0; k < last; ++k) d[k] = src[off + k * step];
    }
  });
}

void transpose_cpu(const KernelCtx&, const Attrs& a, std::span<const Tensor> in, std::span<const Tensor> out) {
  auto g = graph_perm(a.ints("perm"), in[0].shape());
  switch (dtype_size(in[0].dtype())) {
    case 2: transpose_copy<uint16_t>(in[0], out[0], g); break;
    case 4: transpose_copy<uint32_t>(in[0], out[0], g); break;
    case 8: transpose_copy<uint64_t>(in[0], out[0], g); break;
    default: BRAID_ASSERT(false, "transpose of ", dtype_name(in[0].dtype()));
  }
}

void transpose_grad_rule(GradCtx& c) {
  if (!c.dout[0].valid() || !c.needs[0]) return;
  auto g = graph_perm(c.attrs.ints("perm"), c.g.desc(c.inputs[0]).shape);
  std::vector<int64_t> inv(g.size() - 1);
  for (size_t j = 1; j < g.size(); ++j) inv[static_cast<size_t>(g[j] - 1)] = static_cast<int64_t>(j - 1);
  c.din[0] = c.g.emit("transpose", {{"perm", inv}}, {c.dout[0]})[0];
}

// Input S(a) -> output S(j) where output axis j is input axis a (batch: S(0) -> S(0)).
std::vector<SplitSignature> transpose_splits(const Attrs& a, std::span<const TensorDesc> in,
                                             std::span<const TensorDesc> out) {
  auto g = graph_perm(a.ints("perm"), in[0].shape);
  auto sigs = all_broadcast(in, out);
  for (size_t j = 0; j < g.size(); ++j)
    sigs.push_back({g[j] == 0 ? "data" : "split" + std::to_string(g[j]), {Sbp::S(g[j])},
                    {Sbp::S(static_cast<int>(j))}});
  return sigs;
}

std::vector<Sample> transpose_samples() {
  using V = std::vector<int64_t>;
  return {{"3d_sample", {{"perm", V{2, 0, 1}}}, {{TensorDesc{Shape{2, 3, 4, 5}}}}},
          {"3d_sample_neg", {{"perm", V{-1, 1, 0}}}, {{TensorDesc{Shape{2, 3, 2, 4}}}}},
          {"2d_sample", {{"perm", V{1, 0}}}, {{TensorDesc{Shape{3, 2, 5}}}}}};
}
std::vector<BadSample> transpose_bad() {
  using V = std::vector<int64_t>;
  return {{"repeat", {{"perm", V{0, 0}}}, {TensorDesc{Shape{2, 3, 4}}},
           "'perm' [0, 0] is not a permutation of the 2 axes of per-sample shape [3, 4]"},
          {"length", {{"perm", V{1, 0}}}, {TensorDesc{Shape{2, 3, 4, 5}}}, "not a permutation of the 3 axes"},
          {"range", {{"perm", V{0, 2}}}, {TensorDesc{Shape{2, 3, 4}}}, "not a permutation"}};
}

OpDef shape_def(const std::string& name, std::string doc) {
  OpDef d;
  d.name = name;
  d.doc = std::move(doc);
  d.cost = copy_cost;
  d.autocast = Autocast::Follow;
  return d;
}

}  // namespace

void register_shape(Registry& r) {
  {
    OpDef d = shape_def("concat", "joins two or more inputs along a per-sample axis; other sizes must match");
    d.attrs = {{"axis", AttrKind::Int, AttrValue(int64_t{-1}), false, {}, 0, false, false, "per-sample axis"}};
    d.min_inputs = 2;
    d.max_inputs = -1;
    d.infer = infer_concat;
    d.grad = concat_grad_rule;
    d.splits = concat_splits;
    d.cpu = concat_cpu;
    d.samples = concat_samples;
    d.bad_samples = concat_bad;
    r.add(d);
  }
  {
    OpDef d = shape_def("slice", "elements [start, start + length) of a per-sample axis (gradient of concat)");
    d.attrs = {{"axis", AttrKind::Int, std::nullopt, false, {}, 0, false, false, "per-sample axis"},
               {"start", AttrKind::Int, std::nullopt, false, {}, 0, false, true, "first index kept"},
               {"length", AttrKind::Int, std::nullopt, false, {}, 0, true, false, "number of indices kept"}};
    d.internal = true;
    d.differentiable = false;
    d.infer = infer_slice;
    d.splits = slice_splits;
    d.cpu = slice_cpu;
    r.add(d);
  }
  {
    OpDef d = shape_def("flatten", "[B, ...] -> [B, prod(...)]: one axis per sample, row-major order");
    d.infer = infer_flatten;
    d.grad = reshape_back_rule;
    d.splits = flatten_splits;
    d.cpu = copy_cpu;
    d.samples = flatten_samples;
    d.bad_samples = flatten_bad;
    r.add(d);
  }
  {
    OpDef d = shape_def("reshape", "gives each sample the per-sample `shape` (one -1 inferred), row-major order");
    d.attrs = {{"shape", AttrKind::Ints, std::nullopt, false, {}, 0, false, false,
                "per-sample shape; one size may be -1"}};
    d.infer = infer_reshape;
    d.grad = reshape_back_rule;
    d.splits = batch_only_splits;
    d.cpu = copy_cpu;
    d.samples = reshape_samples;
    d.bad_samples = reshape_bad;
    r.add(d);
  }
  {
    OpDef d = shape_def("transpose", "permutes the per-sample axes: output axis i is input axis perm[i]");
    d.attrs = {{"perm", AttrKind::Ints, std::nullopt, false, {}, 0, false, false,
                "a permutation of the per-sample axes"}};
    d.infer = infer_transpose;
    d.grad = transpose_grad_rule;
    d.splits = transpose_splits;
    d.cpu = transpose_cpu;
    d.samples = transpose_samples;
    d.bad_samples = transpose_bad;
    r.add(d);
  }
}

}  // namespace braid::ops
