// Eager execution of ops and the split-consistency machinery for the registry-driven suites.
#include "op_harness.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

namespace braid::testing {

using namespace braid::ops;

ValueId Eager::add(Tensor t) {
  vals_.push_back(std::move(t));
  return ValueId(static_cast<int32_t>(vals_.size() - 1));
}

std::vector<ValueId> Eager::emit(const std::string& op, const Attrs& attrs_in, const std::vector<ValueId>& inputs) {
  const OpDef& def = Registry::get().at(op);
  Attrs attrs = attrs_in;
  complete_attrs(def, attrs);
  std::vector<TensorDesc> descs;
  std::vector<Tensor> in;
  for (auto v : inputs) {
    descs.push_back(desc(v));
    in.push_back(val(v));
  }
  // Outputs start as garbage (NaN), as in the executor's reused arena: kernels must write every element.
  auto out = run_poisoned(def, attrs, in, def.infer(attrs, descs), ctx);
  std::vector<ValueId> ids;
  for (auto& t : out) ids.push_back(add(t));
  return ids;
}

bool Instance::differentiable_input(int i) const {
  if (!def->differentiable) return false;
  if (!is_float(inputs[static_cast<size_t>(i)].dtype())) return false;
  if (i < num_data) return std::find(def->nondiff_inputs.begin(), def->nondiff_inputs.end(), i) == def->nondiff_inputs.end();
  return !params[static_cast<size_t>(i - num_data)].buffer;
}

static Tensor random_tensor(const TensorDesc& d, double lo, double hi, int64_t int_high, Rng& rng) {
  Tensor t = Tensor::empty(d);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (is_int(d.dtype)) set_from_double(t, i, static_cast<double>(rng.below(static_cast<uint64_t>(std::max<int64_t>(int_high, 1)))));
    else set_from_double(t, i, rng.uniform(lo, hi));
  }
  return t;
}

Instance instantiate(const OpDef& def, const Sample& sample, DType dtype, Rng& rng) {
  Instance inst;
  inst.def = &def;
  inst.label = def.name + "/" + sample.name;
  inst.attrs = sample.attrs;
  complete_attrs(def, inst.attrs);
  std::vector<TensorDesc> data;
  for (const auto& ti : sample.inputs) {
    TensorDesc d = ti.desc;
    if (is_float(d.dtype)) d.dtype = dtype;
    data.push_back(d);
    inst.inputs.push_back(random_tensor(d, ti.lo, ti.hi, ti.int_high, rng));
  }
  inst.num_data = static_cast<int>(data.size());
  if (def.params) inst.params = def.params(inst.attrs, data);
  for (auto& p : inst.params) {
    TensorDesc d = p.desc;
    if (is_float(d.dtype)) d.dtype = dtype;
    p.desc = d;
    if (p.buffer) {  // buffers start at their init (running_var = 1), nudged to stay valid
      Tensor t = Tensor::empty(d);
      for (int64_t i = 0; i < t.numel(); ++i)
        set_from_double(t, i, (p.init.kind == InitSpec::Kind::Ones ? 1.0 : 0.0) + 0.25 * rng.uniform());
      inst.inputs.push_back(t);
    } else {
      inst.inputs.push_back(random_tensor(d, -1, 1, 0, rng));
    }
  }
  return inst;
}

std::vector<Tensor> run_forward(const Instance& inst, bool training, uint64_t rng_key) {
  Eager e;
  e.ctx.training = training;
  e.ctx.rng_key = rng_key;
  e.ctx.batch_offset = inst.batch_offset;
  std::vector<ValueId> in;
  for (const auto& t : inst.inputs) in.push_back(e.add(t.clone()));
  auto out = e.emit(inst.def->name, inst.attrs, in);
  std::vector<Tensor> res;
  for (auto v : out) res.push_back(e.val(v));
  return res;
}

namespace {

// Runs inst's forward on `e`, then, where any input wants a gradient, its gradient rule with output 0's
// gradient seed(output 0). Returns the gradient of each input (kNoValue where none) and the seed.
struct Grads {
  std::vector<ValueId> din;
  ValueId dy = kNoValue;
};
Grads forward_backward(Eager& e, const Instance& inst, const std::function<ValueId(ValueId)>& seed) {
  std::vector<ValueId> in;
  for (const auto& t : inst.inputs) in.push_back(e.add(t.clone()));
  auto out = e.emit(inst.def->name, inst.attrs, in);
  GradCtx c{e, inst.attrs, in, out, std::vector<ValueId>(out.size(), kNoValue), {},
            std::vector<ValueId>(in.size(), kNoValue), inst.def->name};
  bool any = false;
  for (size_t i = 0; i < in.size(); ++i) {
    c.needs.push_back(inst.differentiable_input(static_cast<int>(i)));
    any |= c.needs.back();
  }
  if (!any) return {c.din, kNoValue};
  c.dout[0] = seed(out[0]);
  inst.def->grad(c);
  for (size_t i = 0; i < in.size(); ++i)
    if (!c.needs[i]) c.din[i] = kNoValue;
  return {c.din, c.dout[0]};
}

}  // namespace

std::vector<Tensor> run_backward(const Instance& inst, const Tensor& dy, uint64_t rng_key) {
  Eager e;
  e.ctx.training = true;
  e.ctx.rng_key = rng_key;
  e.ctx.batch_offset = inst.batch_offset;
  auto grads = forward_backward(e, inst, [&](ValueId) { return e.add(dy); });
  std::vector<Tensor> res;
  for (auto v : grads.din) res.push_back(v.valid() ? e.val(v) : Tensor());
  return res;
}

std::vector<const OpDef*> public_ops() {
  std::vector<const OpDef*> out;
  for (const auto* d : Registry::get().all())
    if (!d->internal) out.push_back(d);
  return out;
}

// ---- split consistency ----------------------------------------------------------------------------------
std::vector<Tensor> run_poisoned(const OpDef& def, const Attrs& attrs, const std::vector<Tensor>& in,
                                 const std::vector<TensorDesc>& out_descs, KernelCtx ctx) {
  BRAID_ASSERT(def.cpu != nullptr, "op ", def.name, " has no CPU kernel");
  std::vector<TensorDesc> descs;
  for (const auto& t : in) descs.push_back(t.desc());
  // Each output is a view on the front of a buffer whose every byte is 0xff (NaN as float and double, -1 as
  // an integer), the rest of it a guard as long as four outputs: a kernel that writes past its output (a
  // layout that misstates a shard's shape) fails below instead of corrupting the heap.
  std::vector<Tensor> store, out;
  for (const auto& d : out_descs) {
    store.push_back(Tensor::empty({Shape{5 * d.numel() + 64}, d.dtype}));
    std::memset(store.back().raw(), 0xff, store.back().bytes());
    out.push_back(Tensor::view(store.back().raw(), d));
  }
  std::vector<unsigned char> ws;
  if (def.workspace) {
    ws.assign(def.workspace(attrs, descs, out_descs), 0xff);  // 0xff..: NaN as float and as double
    ctx.workspace = ws.data();
    ctx.workspace_bytes = ws.size();
  }
  def.cpu(ctx, attrs, in, out);
  for (size_t o = 0; o < out.size(); ++o) {
    const auto* guard = static_cast<const unsigned char*>(store[o].raw());
    bool intact =
        std::all_of(guard + out[o].bytes(), guard + store[o].bytes(), [](unsigned char b) { return b == 0xff; });
    EXPECT_TRUE(intact) << def.name << " wrote past output " << o << " " << out[o].desc().str();
    out[o] = out[o].clone();
  }
  return out;
}

namespace {

// t viewed as (outer, len, inner) around `axis`, inner in bytes.
struct AxisView {
  int64_t outer = 1, len = 0, inner = 0;
  AxisView(const Shape& s, int axis, DType t) : len(s[axis]), inner(static_cast<int64_t>(dtype_size(t))) {
    for (int a = 0; a < axis; ++a) outer *= s[a];
    for (int a = axis + 1; a < s.rank(); ++a) inner *= s[a];
  }
};

}  // namespace

Tensor slice_along(const Tensor& t, int axis, int64_t begin, int64_t end) {
  AxisView v(t.shape(), axis, t.dtype());
  Shape s = t.shape();
  s[axis] = end - begin;
  Tensor r = Tensor::empty({s, t.dtype()});
  const int64_t row = (end - begin) * v.inner;
  for (int64_t o = 0; o < v.outer; ++o)
    std::memcpy(static_cast<char*>(r.raw()) + o * row,
                static_cast<const char*>(t.raw()) + (o * v.len + begin) * v.inner, static_cast<size_t>(row));
  return r;
}

Tensor concat_along(const std::vector<Tensor>& parts, int axis) {
  Shape s = parts[0].shape();
  s[axis] = 0;
  for (const auto& p : parts) s[axis] += p.shape()[axis];
  Tensor r = Tensor::empty({s, parts[0].dtype()});
  AxisView v(s, axis, r.dtype());
  int64_t begin = 0;
  for (const auto& p : parts) {
    const int64_t row = p.shape()[axis] * v.inner;
    for (int64_t o = 0; o < v.outer; ++o)
      std::memcpy(static_cast<char*>(r.raw()) + (o * v.len + begin) * v.inner,
                  static_cast<const char*>(p.raw()) + o * row, static_cast<size_t>(row));
    begin += p.shape()[axis];
  }
  return r;
}

double max_rel_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.desc(), b.desc());
  if (a.desc() != b.desc()) return std::numeric_limits<double>::infinity();
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    double x = get_as_double(a, i), y = get_as_double(b, i);
    if (std::isnan(x) || std::isnan(y)) return std::numeric_limits<double>::infinity();
    m = std::max(m, std::abs(x - y) / (1 + std::abs(y)));
  }
  return m;
}

namespace {

// Records every op call (the forward and each op its gradient rule emits) while running it eagerly.
class Recorder : public Eager {
 public:
  std::vector<ValueId> emit(const std::string& op, const Attrs& attrs, const std::vector<ValueId>& inputs) override {
    Call c{op, attrs, {}, ctx};
    complete_attrs(Registry::get().at(op), c.attrs);
    for (auto v : inputs) c.inputs.push_back(val(v).clone());
    calls.push_back(std::move(c));
    input_ids.push_back(inputs);
    return Eager::emit(op, attrs, inputs);
  }
  std::vector<Call> calls;
  std::vector<std::vector<ValueId>> input_ids;  // of each call
};

}  // namespace

std::vector<Call> record_forward_backward(const Instance& inst, bool training, Rng& rng) {
  Recorder e;
  e.ctx.training = training;
  e.ctx.rng_key = 7;
  e.ctx.batch_offset = inst.batch_offset;
  bool loss = false;
  auto grads = forward_backward(e, inst, [&](ValueId y) {
    if ((loss = e.desc(y).shape.rank() == 0)) return e.emit("ones_like", {}, {y})[0];  // autodiff's seed of a loss
    Tensor dy = Tensor::empty(e.desc(y));
    for (int64_t i = 0; i < dy.numel(); ++i) set_from_double(dy, i, rng.uniform(-1, 1));
    return e.add(dy);
  });
  e.calls[0].public_forward = true;
  for (size_t k = 0; k < e.calls.size() && loss; ++k) {
    const auto& ids = e.input_ids[k];
    auto it = std::find(ids.begin(), ids.end(), grads.dy);
    if (it != ids.end()) e.calls[k].dloss_input = static_cast<int>(it - ids.begin());
  }
  return std::move(e.calls);
}

const char* eval_only_reason(const std::string& op, const std::string& signature) {
  // batch_norm's `data` signature normalises each shard with ITS OWN batch statistics (PyTorch DDP without
  // SyncBatchNorm; see bn_splits): in training it is not the unsplit op by design, in eval it is.
  static const char* kPerDeviceStatistics =
      "per-device batch statistics in training by design (exact in eval; parallel.sync_batch_norm is exact)";
  if ((op == "batch_norm" || op == "batch_norm_grad") && signature == "data") return kPerDeviceStatistics;
  return nullptr;
}

namespace {

// Start of piece k of n along an axis of `len`: equal pieces, or balanced ones (the first len % n one longer).
int64_t piece_begin(int64_t len, int n, int k) { return k * (len / n) + std::min<int64_t>(k, len % n); }

// Whether `sig` can run on n shards: every split axis at least n long, and either all split axes of one
// length (pieces may be uneven, they line up) or every one divisible by n (equal pieces).
bool shardable(const SplitSignature& sig, std::span<const TensorDesc> in, std::span<const TensorDesc> out, int n) {
  std::vector<int64_t> lens;
  auto collect = [&](const std::vector<Sbp>& sbp, std::span<const TensorDesc> d) {
    for (size_t i = 0; i < d.size(); ++i)
      if (sbp[i].kind == Sbp::Kind::Split) lens.push_back(d[i].shape[sbp[i].axis]);
  };
  collect(sig.inputs, in);
  collect(sig.outputs, out);
  // Per-part splits (Sbp::seg) cut every part into n equal chunks: all split axes then divide by n.
  bool segmented = false;
  auto check_segments = [&](const std::vector<Sbp>& sbp, std::span<const TensorDesc> d) {
    bool ok = true;
    for (size_t i = 0; i < d.size(); ++i)
      if (sbp[i].segmented()) segmented = true, ok &= sbp[i].splits_evenly(d[i].shape[sbp[i].axis], n);
    return ok;
  };
  if (!check_segments(sig.inputs, in) || !check_segments(sig.outputs, out)) return false;
  bool same = !segmented, divisible = true;
  for (int64_t l : lens) {
    if (l < n) return false;
    same &= l == lens[0];
    divisible &= l % n == 0;
  }
  return same || divisible;
}

// The (begin, end) ranges along p's axis of t's length `len` that piece k of n holds under a per-part split
// (Sbp::seg): chunk k of every part, in order.
std::vector<std::pair<int64_t, int64_t>> segment_ranges(const Sbp& p, int64_t len, int n, int k) {
  const int64_t unit = len / (p.seg[0] + p.seg[1] + p.seg[2]);
  std::vector<std::pair<int64_t, int64_t>> r;
  int64_t at = 0;
  for (int64_t seg : p.seg) {
    const int64_t chunk = seg * unit / n;
    r.emplace_back(at + k * chunk, at + (k + 1) * chunk);
    at += seg * unit;
  }
  return r;
}

// Piece k of n of t under layout p: S sliced, B whole, P as shares (random, the last one the remainder).
Tensor shard_of(const Tensor& t, const Sbp& p, int n, int k, Tensor& rest, Rng& rng) {
  switch (p.kind) {
    case Sbp::Kind::Split: {
      if (p.segmented()) {
        std::vector<Tensor> parts;
        for (auto [b, e] : segment_ranges(p, t.shape()[p.axis], n, k)) parts.push_back(slice_along(t, p.axis, b, e));
        return concat_along(parts, p.axis);
      }
      int64_t len = t.shape()[p.axis];
      return slice_along(t, p.axis, piece_begin(len, n, k), piece_begin(len, n, k + 1));
    }
    case Sbp::Kind::Broadcast: return t.clone();
    case Sbp::Kind::Partial: break;
  }
  EXPECT_TRUE(is_float(t.dtype())) << "P on an integer input";
  if (k == 0) rest = t.clone();
  if (k == n - 1) return rest;
  Tensor share = Tensor::empty(t.desc());
  for (int64_t e = 0; e < t.numel(); ++e) {
    double v = rng.uniform(-1, 1);
    set_from_double(share, e, v);
    set_from_double(rest, e, get_as_double(rest, e) - v);
  }
  return share;
}

// The shards' values of one tensor under layout p, reassembled; weight[k] scales shard k's P value.
Tensor reassemble(const std::vector<Tensor>& parts, const Sbp& p, const std::vector<double>& weight) {
  switch (p.kind) {
    case Sbp::Kind::Split: {
      if (!p.segmented()) return concat_along(parts, p.axis);
      // Per-part split: every piece holds its chunk of each part in order; the whole is the parts, each the pieces'.
      const int n = static_cast<int>(parts.size());
      const int64_t len = parts[0].shape()[p.axis] * n;
      std::vector<Tensor> chunks;
      for (size_t j = 0; j < p.seg.size(); ++j)
        for (int k = 0; k < n; ++k) {
          const auto r = segment_ranges(p, len, n, k);
          int64_t off = 0;  // where part j starts in the piece
          for (size_t i = 0; i < j; ++i) off += r[i].second - r[i].first;
          chunks.push_back(slice_along(parts[static_cast<size_t>(k)], p.axis, off, off + r[j].second - r[j].first));
        }
      return concat_along(chunks, p.axis);
    }
    case Sbp::Kind::Broadcast:
      for (size_t k = 1; k < parts.size(); ++k) EXPECT_EQ(max_rel_diff(parts[k], parts[0]), 0) << "shard " << k;
      return parts[0];
    case Sbp::Kind::Partial: break;
  }
  Tensor sum = Tensor::empty(parts[0].desc());
  for (int64_t e = 0; e < sum.numel(); ++e) {
    double acc = 0;
    for (size_t k = 0; k < parts.size(); ++k) acc += weight[k] * get_as_double(parts[k], e);
    set_from_double(sum, e, acc);
  }
  return sum;
}

double tolerance(DType t) { return t == DType::f32 ? 1e-6 : 1e-10; }

// Runs `call` on n shards under `sig` and compares with the unsplit run (`whole` outputs, `whole_in` inputs
// after it ran).
void check_on_shards(const Call& call, const OpDef& def, const SplitSignature& sig, int n,
                     const std::vector<TensorDesc>& out_descs, const std::vector<Tensor>& whole,
                     const std::vector<Tensor>& whole_in, Rng& rng) {
  SCOPED_TRACE(std::to_string(n) + " shards");
  const size_t n_in = call.inputs.size();
  // N_k / N of each shard: its share of the positions of the first split input (1 where nothing is split).
  std::vector<double> share(static_cast<size_t>(n), 1.0);
  for (size_t i = 0; i < n_in; ++i) {
    if (sig.inputs[i].kind != Sbp::Kind::Split) continue;
    int64_t len = call.inputs[i].shape()[sig.inputs[i].axis];
    for (int k = 0; k < n; ++k)
      share[static_cast<size_t>(k)] =
          static_cast<double>(piece_begin(len, n, k + 1) - piece_begin(len, n, k)) / static_cast<double>(len);
    break;
  }
  std::vector<std::vector<Tensor>> shard_in(static_cast<size_t>(n));
  for (size_t i = 0; i < n_in; ++i) {
    Tensor rest;
    for (int k = 0; k < n; ++k) {
      Tensor t = shard_of(call.inputs[i], sig.inputs[i], n, k, rest, rng);
      if (static_cast<int>(i) == call.dloss_input) {  // the loss's gradient op is fed dloss * N_k / N
        EXPECT_EQ(sig.inputs[i].kind, Sbp::Kind::Broadcast) << "dloss input";
        for (int64_t e = 0; e < t.numel(); ++e)
          set_from_double(t, e, get_as_double(t, e) * share[static_cast<size_t>(k)]);
      }
      shard_in[static_cast<size_t>(k)].push_back(t);
    }
  }
  std::vector<std::vector<Tensor>> shard_out;
  const bool batch_split = sig.inputs[0].kind == Sbp::Kind::Split && sig.inputs[0].axis == 0;
  for (int k = 0; k < n; ++k) {
    std::vector<TensorDesc> descs = out_descs;
    for (size_t o = 0; o < descs.size(); ++o)
      if (sig.outputs[o].kind == Sbp::Kind::Split) {
        int64_t len = out_descs[o].shape[sig.outputs[o].axis];
        descs[o].shape[sig.outputs[o].axis] = piece_begin(len, n, k + 1) - piece_begin(len, n, k);
      }
    KernelCtx ctx = call.ctx;
    if (batch_split) ctx.batch_offset += piece_begin(call.inputs[0].shape()[0], n, k);  // random masks index globally
    if (sig.inputs[0].kind == Sbp::Kind::Split && sig.inputs[0].axis > 0) {  // and on other axes (KernelCtx::shard_*)
      const int ax = sig.inputs[0].axis;
      ctx.shard_axis = ax;
      ctx.shard_start = piece_begin(call.inputs[0].shape()[ax], n, k);
      ctx.shard_full = call.inputs[0].shape()[ax];
    }
    shard_out.push_back(run_poisoned(def, call.attrs, shard_in[static_cast<size_t>(k)], descs, ctx));
  }
  const std::vector<double> ones(static_cast<size_t>(n), 1.0);
  for (size_t o = 0; o < out_descs.size(); ++o) {
    SCOPED_TRACE("output " + std::to_string(o));
    std::vector<Tensor> parts;
    for (auto& r : shard_out) parts.push_back(r[o]);
    bool mean = call.public_forward && out_descs[o].shape.rank() == 0;
    Tensor got = reassemble(parts, sig.outputs[o], mean ? share : ones);
    EXPECT_LE(max_rel_diff(got, whole[o]), tolerance(out_descs[o].dtype)) << "reassembled shards vs the unsplit op";
  }
  if (!call.ctx.training) return;
  for (int m : def.mutated_inputs) {
    SCOPED_TRACE("input " + std::to_string(m) + " updated in place");
    auto i = static_cast<size_t>(m);
    std::vector<Tensor> parts;
    for (auto& s : shard_in) parts.push_back(s[i]);
    EXPECT_LE(max_rel_diff(reassemble(parts, sig.inputs[i], ones), whole_in[i]), tolerance(whole_in[i].dtype()));
  }
}

}  // namespace

std::vector<SignatureCheck> check_call_splits(const Call& call, Rng& rng) {
  const OpDef& def = Registry::get().at(call.op);
  SCOPED_TRACE(call.op + " [" + call.attrs.str() + "] " + (call.ctx.training ? "training" : "eval"));
  std::vector<TensorDesc> descs;
  std::vector<Tensor> whole_in;
  for (const auto& t : call.inputs) {
    descs.push_back(t.desc());
    whole_in.push_back(t.clone());
  }
  auto out_descs = def.infer(call.attrs, descs);
  auto whole = run_poisoned(def, call.attrs, whole_in, out_descs, call.ctx);
  auto sigs = def.splits ? def.splits(call.attrs, descs, out_descs) : all_broadcast(descs, out_descs);
  std::vector<SignatureCheck> res;
  for (const auto& sig : sigs) {
    SCOPED_TRACE("signature " + sig.name);
    for (const auto& r : res) EXPECT_NE(r.name, sig.name) << "duplicate signature name";
    res.push_back(SignatureCheck{sig.name, {}, nullptr});
    if (sig.inputs.size() != descs.size() || sig.outputs.size() != out_descs.size()) {
      ADD_FAILURE() << sig.inputs.size() << " input and " << sig.outputs.size() << " output layouts for "
                    << descs.size() << " inputs and " << out_descs.size() << " outputs";
      continue;
    }
    if (call.ctx.training && (res.back().skipped = eval_only_reason(call.op, sig.name))) continue;
    for (int n : {2, 3}) {
      if (!shardable(sig, descs, out_descs, n)) continue;
      check_on_shards(call, def, sig, n, out_descs, whole, whole_in, rng);
      res.back().shards.push_back(n);
    }
  }
  return res;
}

}  // namespace braid::testing
