// dropout: in training y = x * mask, mask = keep / (1 - p) with keep drawn with probability 1 - p
// (PyTorch's inverted dropout, F.dropout); in eval, or when p = 0, y = x. Nothing is saved for backward:
// dropout_grad(dy) draws the same mask again from the forward's random stream (its `rng_node` attribute names the
// forward node, whose key the executors give it) and computes dx = dy * mask with the forward's arithmetic.
// Invariant: keep is a pure function of (ctx.rng_key, global element index) via braid::uniform_at, so any
// S(0) split reproduces the unsplit mask bit for bit (global index from KernelCtx::batch_offset), and a backward
// redraws its forward's mask (autodiff gives it the forward's batch offset and shard axis).
// It does not reproduce PyTorch's random stream (no reference run can match a training-mode mask).
#include "core/rng.h"
#include "ops/cpu/kernel_util.h"
#include "ops/registry.h"

namespace braid::ops {
namespace {

std::vector<TensorDesc> infer_dropout(const Attrs& a, std::span<const TensorDesc> in) {
  double p = a.f("p");
  if (!(p >= 0 && p < 1))
    throw OpError("dropout probability p must be in [0, 1), got " + std::to_string(p),
                  "p is the probability of zeroing an element; p = 0 disables dropout");
  if (!is_float(in[0].dtype)) throw OpError("input must be floating point, got " + in[0].str());
  if (in[0].shape.rank() < 1) throw OpError("input " + in[0].str() + " has no batch axis");
  return {in[0]};
}

// x: any shape, batch axis first. Element i of this tensor has global index ctx.batch_offset * per_sample + i; on a
// shard of another axis (ctx.shard_axis > 0) its index in the unsplit tensor, from the shard's start on that axis.
// dropout_grad runs the same loop on dy: dx = dy * mask, the mask drawn again (16-bit values run on f32 copies, as
// the forward: the scale 1 / (1 - p) is applied in f32 and rounded once).
void dropout_cpu(const KernelCtx& ctx, const Attrs& a, std::span<const Tensor> in, std::span<const Tensor> out) {
  double p = a.f("p");
  bool active = ctx.training && p > 0;
  int64_t n = in[0].numel();
  int64_t per_sample = in[0].shape()[0] > 0 ? n / in[0].shape()[0] : 0;
  uint64_t key = ctx.rng_key;
  // global(i) = ((batch_offset * rows_per_sample + row) * full + start + t) * inner + k, for i = (row * len + t) * inner
  // + k; unsplit (or split on the batch): full = len, start = 0, which is batch_offset * per_sample + i.
  const Shape& s = in[0].shape();
  const int ax = ctx.shard_axis > 0 && ctx.shard_axis < s.rank() ? ctx.shard_axis : 0;
  int64_t inner = 1, rows_per_sample = 1;
  for (int d = ax + 1; d < s.rank(); ++d) inner *= s[d];
  for (int d = 1; d < ax; ++d) rows_per_sample *= s[d];
  const int64_t len = s.rank() > 0 ? s[ax] : 1;
  const int64_t full = ax > 0 ? ctx.shard_full : len, start = ax > 0 ? ctx.shard_start : 0;
  const int64_t row0 = ax > 0 ? ctx.batch_offset * rows_per_sample : 0;
  const auto base = static_cast<uint64_t>(ax > 0 ? 0 : ctx.batch_offset * per_sample);
  auto global = [=](int64_t i) -> uint64_t {
    if (ax == 0) return base + static_cast<uint64_t>(i);
    const int64_t k = i % inner, t = (i / inner) % len, row = i / (inner * len);
    return static_cast<uint64_t>(((row0 + row) * full + start + t) * inner + k);
  };
  cpu::dispatch_float(in[0].dtype(), [&]<typename T>() {
    const T* x = in[0].data<T>();
    T* y = out[0].data<T>();
    const T scale = static_cast<T>(1.0 / (1.0 - p));
    const uint64_t thr = keep_threshold(p);
    parallel_for(n, 1 << 14, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        T m = T(1);
        if (active) m = kept_at(key, global(i), thr) ? scale : T(0);  // uniform_at(...) >= p
        y[i] = x[i] * m;
      }
    });
  });
}

void dropout_grad_rule(GradCtx& c) {
  if (!c.dout[0].valid() || !c.needs[0]) return;
  // p = 0 (a model's dropout switched off): the mask is all ones, the gradient passes through unchanged.
  if (c.attrs.f("p") == 0) {
    c.din[0] = c.dout[0];
    return;
  }
  c.din[0] = c.g.emit("dropout_grad", {{"p", c.attrs.f("p")}, {"rng_node", c.node_name}}, {c.dout[0]})[0];
}

// data: x S(0) -> y S(0); split<a>: x S(a) -> y S(a) (sequence parallelism). True only because the
// executor sets KernelCtx::batch_offset (the shard's first sample in the whole micro-batch) and, for a > 0,
// KernelCtx::shard_* (its place on axis a) on each shard: the mask then depends on global indices only.
std::vector<SplitSignature> dropout_splits(const Attrs&, std::span<const TensorDesc> in,
                                           std::span<const TensorDesc> out) {
  auto sigs = all_broadcast(in, out);
  sigs.push_back({"data", {Sbp::S(0)}, {Sbp::S(0)}});
  for (int a = 1; a < in[0].shape.rank(); ++a) sigs.push_back({"split" + std::to_string(a), {Sbp::S(a)}, {Sbp::S(a)}});
  return sigs;
}

Cost dropout_cost(const Attrs&, std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
  return default_cost(in, out, 1);  // one multiply per element (mask generation is integer work)
}

std::vector<Sample> dropout_samples() {
  return {{"half", {{"p", 0.5}}, {{TensorDesc{Shape{2, 3, 4}}}}},
          {"quarter", {{"p", 0.25}}, {{TensorDesc{Shape{3, 6}}}}},
          {"zero", {{"p", 0.0}}, {{TensorDesc{Shape{4, 5}}}}}};
}
std::vector<BadSample> dropout_bad() {
  return {{"p_one", {{"p", 1.0}}, {TensorDesc{Shape{2, 3}}}, "must be in [0, 1), got 1"},
          {"p_negative", {{"p", -0.1}}, {TensorDesc{Shape{2, 3}}}, "must be in [0, 1)"},
          {"int", {}, {TensorDesc{Shape{2, 3}, DType::i32}}, "floating point"}};
}

}  // namespace

void register_dropout(Registry& r) {
  OpDef d;
  d.name = "dropout";
  d.autocast = Autocast::Follow;
  d.doc = "zeroes elements with probability p in training and scales the rest by 1/(1-p); identity in eval";
  d.attrs = {{"p", AttrKind::Float, AttrValue(0.5), false, {}, 0, false, false, "probability of zeroing, in [0, 1)"}};
  d.infer = infer_dropout;
  d.grad = dropout_grad_rule;
  d.splits = dropout_splits;
  d.cost = dropout_cost;
  d.cpu = dropout_cpu;
  d.samples = dropout_samples;
  d.bad_samples = dropout_bad;
  r.add(d);

  OpDef g = internal_op("dropout_grad", "gradient of dropout: dy times the forward's mask, drawn again", 1);
  g.attrs = {{"p", AttrKind::Float, AttrValue(0.5), false, {}, 0, false, false, "the forward's p"},
             {"rng_node", AttrKind::String, AttrValue(std::string()), false, {}, 0, false, false,
              "the forward node, whose random stream the mask is drawn from"}};
  g.autocast = Autocast::Follow;
  g.infer = [](const Attrs&, std::span<const TensorDesc> in) { return std::vector<TensorDesc>{in[0]}; };
  g.splits = dropout_splits;
  g.cost = dropout_cost;
  g.cpu = dropout_cpu;  // training is on in backward: the same draw as the forward's
  g.in_place = true;    // dx over dy: element i read, then written
  r.add(g);
}

}  // namespace braid::ops
