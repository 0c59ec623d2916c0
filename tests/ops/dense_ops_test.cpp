// Tests of the dense families (linear, embedding, position_embedding, attention) beyond the registry suites:
//  - split consistency: every signature of every op, forward and internal gradient ops alike, run on 2 or 3
//    shards (S sliced, B whole, P as random shares) and reassembled equals the unsplit op; outputs are
//    poisoned with NaN first, so a kernel that leaves an element unwritten fails;
//  - attention over several row blocks (T > 64, causal, dropout) against a naive double reference and
//    finite differences; token ids outside the table; PyTorch parameter names and inits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <set>

#include "op_harness.h"

using namespace braid;
using namespace braid::ops;
using namespace braid::testing;

namespace {

const std::vector<std::string> kDenseOps = {"linear",    "linear_dx",      "linear_dw",
                                            "linear_db", "embedding",      "embedding_dw",
                                            "position_embedding", "position_embedding_dw",
                                            "attention", "attention_grad"};
const std::vector<std::string> kDensePublic = {"linear", "embedding", "position_embedding", "attention"};

// Records every op call (the forward and each op its gradient rule emits) while running it eagerly.
struct Call {
  std::string op;
  Attrs attrs;
  std::vector<Tensor> inputs;
};
class Recorder : public Eager {
 public:
  std::vector<ValueId> emit(const std::string& op, const Attrs& attrs, const std::vector<ValueId>& inputs) override {
    Call c{op, attrs, {}};
    complete_attrs(Registry::get().at(op), c.attrs);
    for (auto v : inputs) c.inputs.push_back(val(v).clone());
    calls.push_back(std::move(c));
    return Eager::emit(op, attrs, inputs);
  }
  std::vector<Call> calls;
};

std::vector<Call> record_forward_backward(const Instance& inst, Rng& rng) {
  Recorder e;
  e.ctx.training = true;
  e.ctx.rng_key = 7;
  std::vector<ValueId> in;
  for (const auto& t : inst.inputs) in.push_back(e.add(t.clone()));
  auto out = e.emit(inst.def->name, inst.attrs, in);
  Tensor dy = Tensor::empty(e.desc(out[0]));
  for (int64_t i = 0; i < dy.numel(); ++i) set_from_double(dy, i, rng.uniform(-1, 1));
  GradCtx c{e, inst.attrs, in, out, std::vector<ValueId>(out.size(), kNoValue), {}, std::vector<ValueId>(in.size(), kNoValue)};
  c.dout[0] = e.add(dy);
  for (size_t i = 0; i < in.size(); ++i) c.needs.push_back(inst.differentiable_input(static_cast<int>(i)));
  inst.def->grad(c);
  return std::move(e.calls);
}

// Runs op `def` on `in` with outputs of `out_descs` poisoned with NaN (and a poisoned workspace).
std::vector<Tensor> run_poisoned(const OpDef& def, const Attrs& attrs, const std::vector<Tensor>& in,
                                 const std::vector<TensorDesc>& out_descs, bool training = true,
                                 int64_t batch_offset = 0) {
  std::vector<TensorDesc> descs;
  for (const auto& t : in) descs.push_back(t.desc());
  std::vector<Tensor> out;
  for (const auto& d : out_descs) {
    Tensor t = Tensor::empty(d);
    for (int64_t i = 0; i < t.numel(); ++i) set_from_double(t, i, std::numeric_limits<double>::quiet_NaN());
    out.push_back(t);
  }
  KernelCtx ctx;
  ctx.training = training;
  ctx.rng_key = 7;
  ctx.batch_offset = batch_offset;
  std::vector<unsigned char> ws;
  if (def.workspace) {
    ws.assign(def.workspace(attrs, descs, out_descs), 0xff);  // 0xff..: NaN as float and double
    ctx.workspace = ws.data();
    ctx.workspace_bytes = ws.size();
  }
  def.cpu(ctx, attrs, in, out);
  return out;
}

// Piece k of n equal pieces of t along `axis`.
Tensor slice(const Tensor& t, int axis, int n, int k) {
  const Shape& s = t.shape();
  int64_t outer = 1, inner = static_cast<int64_t>(dtype_size(t.dtype()));
  for (int a = 0; a < axis; ++a) outer *= s[a];
  for (int a = axis + 1; a < s.rank(); ++a) inner *= s[a];
  int64_t piece = s[axis] / n;
  Shape ps = s;
  ps[axis] = piece;
  Tensor r = Tensor::empty({ps, t.dtype()});
  auto* src = static_cast<const char*>(t.raw());
  auto* dst = static_cast<char*>(r.raw());
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(dst + o * piece * inner, src + (o * s[axis] + k * piece) * inner, static_cast<size_t>(piece * inner));
  return r;
}

Tensor concat(const std::vector<Tensor>& parts, int axis) {
  Shape s = parts[0].shape();
  s[axis] *= static_cast<int64_t>(parts.size());
  Tensor r = Tensor::empty({s, parts[0].dtype()});
  int64_t outer = 1, inner = static_cast<int64_t>(dtype_size(r.dtype()));
  for (int a = 0; a < axis; ++a) outer *= s[a];
  for (int a = axis + 1; a < s.rank(); ++a) inner *= s[a];
  int64_t piece = parts[0].shape()[axis];
  for (int64_t o = 0; o < outer; ++o)
    for (size_t k = 0; k < parts.size(); ++k)
      std::memcpy(static_cast<char*>(r.raw()) + (o * s[axis] + static_cast<int64_t>(k) * piece) * inner,
                  static_cast<const char*>(parts[k].raw()) + o * piece * inner, static_cast<size_t>(piece * inner));
  return r;
}

double max_rel_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.desc(), b.desc());
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    double x = get_as_double(a, i), y = get_as_double(b, i);
    if (std::isnan(x) || std::isnan(y)) return std::numeric_limits<double>::infinity();
    m = std::max(m, std::abs(x - y) / (1 + std::abs(y)));
  }
  return m;
}

// Checks every signature of one call on 2 or 3 shards; records the signatures it could check.
void check_call_splits(const Call& call, Rng& rng, std::map<std::string, std::set<std::string>>& offered,
                       std::map<std::string, std::set<std::string>>& checked) {
  const OpDef& def = Registry::get().at(call.op);
  std::vector<TensorDesc> descs;
  for (const auto& t : call.inputs) descs.push_back(t.desc());
  auto out_descs = def.infer(call.attrs, descs);
  auto full = run_poisoned(def, call.attrs, call.inputs, out_descs);
  auto sigs = def.splits ? def.splits(call.attrs, descs, out_descs) : all_broadcast(descs, out_descs);
  std::set<std::string> names;
  for (const auto& sig : sigs) {
    SCOPED_TRACE(call.op + " [" + call.attrs.str() + "] signature " + sig.name);
    EXPECT_TRUE(names.insert(sig.name).second) << "duplicate signature name";
    offered[call.op].insert(sig.name);
    for (int n : {2, 3}) {
      bool ok = true;
      for (size_t i = 0; i < descs.size(); ++i)
        if (sig.inputs[i].kind == Sbp::Kind::Split) ok &= descs[i].shape[sig.inputs[i].axis] % n == 0;
      for (size_t i = 0; i < out_descs.size(); ++i)
        if (sig.outputs[i].kind == Sbp::Kind::Split) ok &= out_descs[i].shape[sig.outputs[i].axis] % n == 0;
      if (!ok) continue;
      // Shard inputs: S sliced, B whole, P as random shares summing to the input.
      std::vector<std::vector<Tensor>> shard_in(static_cast<size_t>(n));
      for (size_t i = 0; i < descs.size(); ++i) {
        const Tensor& t = call.inputs[i];
        Tensor rest = t.clone();
        for (int k = 0; k < n; ++k) {
          auto uk = static_cast<size_t>(k);
          switch (sig.inputs[i].kind) {
            case Sbp::Kind::Split: shard_in[uk].push_back(slice(t, sig.inputs[i].axis, n, k)); break;
            case Sbp::Kind::Broadcast: shard_in[uk].push_back(t.clone()); break;
            case Sbp::Kind::Partial: {
              ASSERT_TRUE(is_float(t.dtype())) << "P on an integer input";
              if (k == n - 1) {
                shard_in[uk].push_back(rest);
                break;
              }
              Tensor share = Tensor::empty(t.desc());
              for (int64_t e = 0; e < t.numel(); ++e) {
                double v = rng.uniform(-1, 1);
                set_from_double(share, e, v);
                set_from_double(rest, e, get_as_double(rest, e) - v);
              }
              shard_in[uk].push_back(share);
            }
          }
        }
      }
      std::vector<TensorDesc> shard_out;
      for (size_t i = 0; i < out_descs.size(); ++i) {
        TensorDesc d = out_descs[i];
        if (sig.outputs[i].kind == Sbp::Kind::Split) d.shape[sig.outputs[i].axis] /= n;
        shard_out.push_back(d);
      }
      std::vector<std::vector<Tensor>> res;
      // A shard of the batch axis starts at sample k * piece of the whole batch (random masks index globally).
      bool batch_split = sig.inputs[0].kind == Sbp::Kind::Split && sig.inputs[0].axis == 0;
      int64_t piece = batch_split ? descs[0].shape[0] / n : 0;
      for (int k = 0; k < n; ++k)
        res.push_back(run_poisoned(def, call.attrs, shard_in[static_cast<size_t>(k)], shard_out, true, k * piece));
      for (size_t i = 0; i < out_descs.size(); ++i) {
        SCOPED_TRACE("output " + std::to_string(i) + " on " + std::to_string(n) + " shards");
        std::vector<Tensor> parts;
        for (auto& r : res) parts.push_back(r[i]);
        Tensor combined;
        switch (sig.outputs[i].kind) {
          case Sbp::Kind::Split: combined = concat(parts, sig.outputs[i].axis); break;
          case Sbp::Kind::Broadcast:
            for (int k = 1; k < n; ++k) EXPECT_EQ(max_rel_diff(parts[static_cast<size_t>(k)], parts[0]), 0);
            combined = parts[0];
            break;
          case Sbp::Kind::Partial:
            combined = parts[0].clone();
            for (int k = 1; k < n; ++k)
              for (int64_t e = 0; e < combined.numel(); ++e)
                set_from_double(combined, e, get_as_double(combined, e) + get_as_double(parts[static_cast<size_t>(k)], e));
        }
        EXPECT_LE(max_rel_diff(combined, full[i]), 1e-10);
      }
      checked[call.op].insert(sig.name);
      break;
    }
  }
}

}  // namespace

TEST(DenseOps, EverySplitSignatureReassemblesTheUnsplitResult) {
  Rng rng(3, 3);
  std::map<std::string, std::set<std::string>> offered, checked;
  for (const auto& name : kDensePublic) {
    const OpDef& def = Registry::get().at(name);
    for (const auto& s : def.samples()) {
      SCOPED_TRACE(name + "/" + s.name);
      Instance inst = instantiate(def, s, DType::f64, rng);
      for (const auto& call : record_forward_backward(inst, rng)) check_call_splits(call, rng, offered, checked);
    }
  }
  for (const auto& name : kDenseOps) {
    EXPECT_TRUE(offered.count(name)) << name << " was never reached";
    for (const auto& sig : offered[name])
      EXPECT_TRUE(checked[name].count(sig)) << name << " signature " << sig << ": no sample has divisible sizes";
  }
}

TEST(DenseOps, EvalModeForwardWritesEveryOutput) {
  Rng rng(4, 4);
  for (const auto& name : kDensePublic) {
    const OpDef& def = Registry::get().at(name);
    for (const auto& s : def.samples()) {
      SCOPED_TRACE(name + "/" + s.name);
      Instance inst = instantiate(def, s, DType::f32, rng);
      std::vector<TensorDesc> descs;
      for (const auto& t : inst.inputs) descs.push_back(t.desc());
      auto out = run_poisoned(def, inst.attrs, inst.inputs, def.infer(inst.attrs, descs), /*training=*/false);
      for (const auto& t : out)
        for (int64_t i = 0; i < t.numel(); ++i) ASSERT_FALSE(std::isnan(get_as_double(t, i))) << "element " << i;
    }
  }
}

// ---- attention over several row blocks against a naive reference -------------------------------------------
namespace {

// Direct transcription of nn.MultiheadAttention (batch_first, self-attention), double precision.
std::vector<double> naive_attention(const Instance& inst, bool training, uint64_t key) {
  const auto& a = inst.attrs;
  bool bias = a.b("bias"), causal = a.b("causal");
  double p = training ? a.f("dropout") : 0;
  const Tensor& x = inst.inputs[0];
  int64_t B = x.shape()[0], T = x.shape()[1], d = x.shape()[2], H = a.i("heads"), dh = d / H;
  auto at = [&](int i, int64_t k) { return get_as_double(inst.inputs[static_cast<size_t>(i)], k); };
  int w_in = 1, b_in = bias ? 2 : -1, w_out = bias ? 3 : 2, b_out = bias ? 4 : -1;
  std::vector<double> qkv(static_cast<size_t>(B * T * 3 * d)), ctx(static_cast<size_t>(B * T * d)),
      y(static_cast<size_t>(B * T * d));
  for (int64_t r = 0; r < B * T; ++r)
    for (int64_t o = 0; o < 3 * d; ++o) {
      double s = b_in >= 0 ? at(b_in, o) : 0;
      for (int64_t i = 0; i < d; ++i) s += at(0, r * d + i) * at(w_in, o * d + i);
      qkv[static_cast<size_t>(r * 3 * d + o)] = s;
    }
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> s(static_cast<size_t>(T), -INFINITY);
        double mx = -INFINITY;
        for (int64_t j = 0; j < T; ++j) {
          if (causal && j > i) continue;
          double acc = 0;
          for (int64_t e = 0; e < dh; ++e)
            acc += qkv[static_cast<size_t>((b * T + i) * 3 * d + h * dh + e)] / std::sqrt(double(dh)) *
                   qkv[static_cast<size_t>((b * T + j) * 3 * d + d + h * dh + e)];
          s[static_cast<size_t>(j)] = acc;
          mx = std::max(mx, acc);
        }
        double sum = 0;
        for (auto& v : s) sum += (v = std::exp(v - mx));
        for (int64_t j = 0; j < T; ++j) {
          double pr = s[static_cast<size_t>(j)] / sum;
          if (p > 0) pr = uniform_at(key, static_cast<uint64_t>(((b * H + h) * T + i) * T + j)) >= p ? pr / (1 - p) : 0;
          for (int64_t e = 0; e < dh; ++e)
            ctx[static_cast<size_t>((b * T + i) * d + h * dh + e)] +=
                pr * qkv[static_cast<size_t>((b * T + j) * 3 * d + 2 * d + h * dh + e)];
        }
      }
  for (int64_t r = 0; r < B * T; ++r)
    for (int64_t o = 0; o < d; ++o) {
      double s = b_out >= 0 ? at(b_out, o) : 0;
      for (int64_t i = 0; i < d; ++i) s += ctx[static_cast<size_t>(r * d + i)] * at(w_out, o * d + i);
      y[static_cast<size_t>(r * d + o)] = s;
    }
  return y;
}

}  // namespace

TEST(DenseOps, AttentionOverSeveralRowBlocksMatchesNaiveReference) {
  Rng rng(5, 5);
  const OpDef& def = Registry::get().at("attention");
  struct Case {
    int64_t heads;
    bool causal, bias;
    double dropout;
    int64_t t, d;
  };
  // Row blocks of 64 (d = 8: 64+64+2, 64+6, 64+1) and, with d = 64 (T dh > 2^12), blocks of 31 rows.
  for (const Case& cs : {Case{2, true, true, 0.2, 130, 8}, Case{1, false, false, 0.0, 70, 8},
                         Case{4, true, false, 0.0, 65, 8}, Case{1, true, true, 0.1, 130, 64}}) {
    Sample s{"long", {{"heads", cs.heads}, {"causal", cs.causal}, {"bias", cs.bias}, {"dropout", cs.dropout}},
             {{TensorDesc{Shape{2, cs.t, cs.d}}}}};
    SCOPED_TRACE("T=" + std::to_string(cs.t) + " " + s.attrs.str());
    Instance inst = instantiate(def, s, DType::f64, rng);
    // The harness draws weights in [-1, 1]; scaled as an init would for wide d, so that the softmax stays
    // smooth enough for finite differences.
    for (size_t k = 1; k < inst.inputs.size(); ++k)
      if (inst.inputs[k].shape().rank() == 2)
        for (int64_t i = 0; i < inst.inputs[k].numel(); ++i)
          set_from_double(inst.inputs[k], i, get_as_double(inst.inputs[k], i) * std::sqrt(8.0 / double(cs.d)));
    for (bool training : {true, false}) {
      auto y = run_forward(inst, training, 11)[0];
      auto ref = naive_attention(inst, training, 11);
      for (int64_t i = 0; i < y.numel(); ++i) ASSERT_NEAR(get_as_double(y, i), ref[static_cast<size_t>(i)], 1e-12);
    }
    // Gradients at a few probes of every input (the backward's row blocks and slots).
    Tensor r = Tensor::empty(run_forward(inst)[0].desc());
    for (int64_t i = 0; i < r.numel(); ++i) set_from_double(r, i, rng.uniform(-1, 1));
    auto grads = run_backward(inst, r);
    auto objective = [&](const Instance& v) {
      auto y = run_forward(v)[0];
      double acc = 0;
      for (int64_t i = 0; i < y.numel(); ++i) acc += get_as_double(y, i) * get_as_double(r, i);
      return acc;
    };
    for (size_t k = 0; k < inst.inputs.size(); ++k) {
      int64_t n = inst.inputs[k].numel();
      for (int64_t i = n / 13; i < n; i += std::max<int64_t>(1, n / 7)) {
        Instance plus = inst, minus = inst;
        plus.inputs[k] = inst.inputs[k].clone();
        minus.inputs[k] = inst.inputs[k].clone();
        double x0 = get_as_double(inst.inputs[k], i), h = 1e-6;
        set_from_double(plus.inputs[k], i, x0 + h);
        set_from_double(minus.inputs[k], i, x0 - h);
        double numeric = (objective(plus) - objective(minus)) / (2 * h);
        ASSERT_NEAR(get_as_double(grads[k], i), numeric, 1e-6 * std::max(1.0, std::abs(numeric)))
            << "input " << k << " element " << i;
      }
    }
  }
}

TEST(DenseOps, AttentionDropoutOnlyInTrainingAndAtRoughlyRateP) {
  Rng rng(6, 6);
  const OpDef& def = Registry::get().at("attention");
  Sample s{"drop", {{"heads", int64_t{2}}, {"dropout", 0.25}}, {{TensorDesc{Shape{2, 40, 8}}}}};
  Instance inst = instantiate(def, s, DType::f32, rng);
  auto train = run_forward(inst, true, 5), eval = run_forward(inst, false, 5);
  int64_t zeros = 0, n = train[4].numel();
  for (int64_t i = 0; i < n; ++i) zeros += get_as_double(train[4], i) == 0;
  EXPECT_NEAR(static_cast<double>(zeros) / static_cast<double>(n), 0.25, 0.02);
  EXPECT_EQ(max_rel_diff(eval[4], eval[2]), 0);  // eval: dropped probs are the probs
  auto again = run_forward(inst, true, 5), other = run_forward(inst, true, 6);
  EXPECT_EQ(max_rel_diff(again[0], train[0]), 0);  // the mask is a function of the key
  EXPECT_GT(max_rel_diff(other[0], train[0]), 0);
}

// ---- embedding: ids outside the table ----------------------------------------------------------------------
TEST(DenseOps, EmbeddingRejectsIdsOutsideTheTable) {
  Rng rng(7, 7);
  const OpDef& def = Registry::get().at("embedding");
  Sample s{"oob", {{"num", int64_t{7}}, {"dim", int64_t{3}}}, {{TensorDesc{Shape{2, 4}, DType::i32}, 7}}};
  Instance inst = instantiate(def, s, DType::f32, rng);
  EXPECT_EQ(def.int_bound(inst.attrs, {}, 0), 7);
  for (int32_t bad : {7, -1, 1000}) {
    inst.inputs[0].data<int32_t>()[5] = bad;
    try {
      run_forward(inst);
      ADD_FAILURE() << "id " << bad << " accepted";
    } catch (const UserError& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find("token id " + std::to_string(bad) + " (sample 1, position 1) is outside [0, 7)"),
                std::string::npos)
          << msg;
    }
  }
}

// ---- parameters: PyTorch names, shapes and default inits ---------------------------------------------------
TEST(DenseOps, ParametersFollowPyTorch) {
  auto params = [](const std::string& op, Attrs a, TensorDesc x) {
    const OpDef& def = Registry::get().at(op);
    complete_attrs(def, a);
    std::vector<TensorDesc> in{x};
    return def.params(a, in);
  };
  auto lin = params("linear", {{"out", int64_t{3}}}, {Shape{2, 16}});
  ASSERT_EQ(lin.size(), 2u);
  EXPECT_EQ(lin[0].name, "weight");
  EXPECT_EQ(lin[0].desc.shape, (Shape{3, 16}));
  EXPECT_EQ(lin[0].init.str(), "uniform(-0.25, 0.25)");
  EXPECT_EQ(lin[1].name, "bias");
  EXPECT_EQ(lin[1].init.str(), "uniform(-0.25, 0.25)");
  EXPECT_EQ(params("linear", {{"out", int64_t{3}}, {"bias", false}}, {Shape{2, 16}}).size(), 1u);

  auto att = params("attention", {{"heads", int64_t{2}}}, {Shape{2, 5, 6}});
  ASSERT_EQ(att.size(), 4u);
  EXPECT_EQ(att[0].name, "in_proj_weight");
  EXPECT_EQ(att[0].desc.shape, (Shape{18, 6}));
  EXPECT_EQ(att[0].init.str(), "uniform(-0.5, 0.5)");  // xavier: sqrt(6 / (6 + 18))
  EXPECT_EQ(att[1].name, "in_proj_bias");
  EXPECT_EQ(att[1].init.str(), "zeros");
  EXPECT_EQ(att[2].name, "out_proj.weight");
  EXPECT_EQ(att[2].desc.shape, (Shape{6, 6}));
  EXPECT_NEAR(att[2].init.b, 1 / std::sqrt(6.0), 1e-15);
  EXPECT_EQ(att[3].name, "out_proj.bias");
  auto att_nb = params("attention", {{"heads", int64_t{2}}, {"bias", false}}, {Shape{2, 5, 6}});
  ASSERT_EQ(att_nb.size(), 2u);
  EXPECT_EQ(att_nb[1].name, "out_proj.weight");

  auto emb = params("embedding", {{"num", int64_t{10}}, {"dim", int64_t{4}}}, {Shape{2, 3}, DType::i32});
  EXPECT_EQ(emb[0].desc.shape, (Shape{10, 4}));
  EXPECT_EQ(emb[0].init.str(), "normal(0, 1)");
  auto pos = params("position_embedding", {{"max_len", int64_t{9}}}, {Shape{2, 3, 4}});
  EXPECT_EQ(pos[0].desc.shape, (Shape{9, 4}));
  EXPECT_EQ(pos[0].init.str(), "normal(0, 1)");
}
