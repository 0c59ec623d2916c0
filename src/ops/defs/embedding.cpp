// Embedding family: embedding (row lookup weight[token], nn.Embedding without padding_idx / max_norm) and
// position_embedding (x + weight[0:T], learned positions as an nn.Embedding indexed by arange(T)), with
// their internal gradient ops embedding_dw (deterministic scatter-add, tokens in order) and
// position_embedding_dw (dy summed over the batch into rows 0..T-1). A token outside [0, num) never reads or
// writes out of bounds: the forward raises a UserError naming it (the kernels never clamp).
// Kernels take every size from their tensors, so they run unchanged on the shards of their signatures.
#include <algorithm>

#include "ops/cpu/kernel_util.h"
#include "ops/registry.h"

namespace braid::ops {
namespace {

using cpu::dispatch_float;

std::string str(int64_t v) { return std::to_string(v); }

// ---- embedding ------------------------------------------------------------------------------------------
void check_tokens(const TensorDesc& t) {
  if (!is_int(t.dtype))
    throw OpError("embedding takes integer token ids, got " + t.str(), "declare the input with dtype: i32 or i64");
  if (t.shape.rank() < 1) throw OpError("embedding input " + t.str() + " has no batch axis");
}

std::vector<ParamSpec> embedding_params(const Attrs& a, std::span<const TensorDesc> in) {
  check_tokens(in[0]);
  return {{"weight", {Shape{a.i("num"), a.i("dim")}, DType::f32}, InitSpec::normal(0, 1)}};
}

std::vector<TensorDesc> embedding_infer(const Attrs& a, std::span<const TensorDesc> in) {
  check_tokens(in[0]);
  BRAID_ASSERT(in.size() == 2, "embedding takes tokens and weight");
  const TensorDesc& w = in[1];
  if (w.shape != Shape{a.i("num"), a.i("dim")} || !is_float(w.dtype))
    throw OpError("embedding weight is " + w.str() + " but num = " + str(a.i("num")) + ", dim = " + str(a.i("dim")));
  Shape y = in[0].shape;
  y.dims().push_back(w.shape[1]);
  return {TensorDesc{y, w.dtype}};
}

int64_t embedding_int_bound(const Attrs& a, std::span<const TensorDesc>, int index) {
  return index == 0 ? a.i("num") : 0;
}

// Throws UserError naming the first token outside [0, num) (sample and position within the sample).
void check_token_values(const Tensor& tokens, int64_t num, const char* op) {
  int64_t n = tokens.numel();
  int64_t per_sample = tokens.shape().rank() > 0 && tokens.shape()[0] > 0 ? n / tokens.shape()[0] : n;
  for (int64_t i = 0; i < n; ++i) {
    int64_t t = cpu::int_at(tokens, i);
    if (t < 0 || t >= num)
      throw UserError(SourceLoc{},
                      std::string(op) + ": token id " + str(t) + " (sample " + str(i / per_sample) + ", position " +
                          str(i % per_sample) + ") is outside [0, " + str(num) + ")",
                      "the data holds ids the embedding's 'num' (" + str(num) + ") does not cover; raise 'num'");
  }
}

// y[i, :] = W[tokens[i], :]; W (num, dim) row-major.
void embedding_cpu(const KernelCtx&, const Attrs&, std::span<const Tensor> in, std::span<const Tensor> out) {
  const Tensor& tok = in[0];
  int64_t num = in[1].shape()[0], dim = in[1].shape()[1], n = tok.numel();
  check_token_values(tok, num, "embedding");
  dispatch_float(out[0].dtype(), [&]<typename T>() {
    const T* w = in[1].data<T>();
    T* y = out[0].data<T>();
    parallel_for(n, std::max<int64_t>(1, (1 << 14) / dim), [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) std::copy_n(w + cpu::int_at(tok, i) * dim, dim, y + i * dim);
    });
  });
}

void embedding_grad(GradCtx& c) {
  if (!c.dout[0].valid() || !c.needs[1]) return;
  Attrs a{{"num", c.g.desc(c.inputs[1]).shape[0]}};
  c.din[1] = c.g.emit("embedding_dw", a, {c.dout[0], c.inputs[0]})[0];
}

std::vector<SplitSignature> embedding_splits(const Attrs&, std::span<const TensorDesc> in,
                                             std::span<const TensorDesc> out) {
  int last = out[0].shape.rank() - 1;
  auto sigs = all_broadcast(in, out);
  // data: tokens split along the batch ("pos<a>": any other token axis); weight replicated.
  for (int ax = 0; ax < last; ++ax)
    sigs.push_back({ax == 0 ? "data" : "pos" + std::to_string(ax), {Sbp::S(ax), Sbp::B()}, {Sbp::S(ax)}});
  // column: each device holds dim/n columns of the table and produces those features.
  sigs.push_back({"column", {Sbp::B(), Sbp::S(1)}, {Sbp::S(last)}});
  // partial: the lookup is linear in the table.
  sigs.push_back({"partial", {Sbp::B(), Sbp::P()}, {Sbp::P()}});
  // Not offered: vocabulary-parallel (weight S(0) -> P) needs each shard's row offset to mask foreign ids,
  // which a kernel does not see.
  return sigs;
}

Cost embedding_cost(const Attrs&, std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
  return {0, static_cast<double>(in[0].bytes() + 2 * out[0].bytes())};  // ids, rows read, rows written
}

std::vector<Sample> embedding_samples() {
  auto s = [](const std::string& name, int64_t num, int64_t dim, Shape x, DType t) {
    return Sample{name, {{"num", num}, {"dim", dim}}, {{TensorDesc{std::move(x), t}, num}}};
  };
  // Few ids and many tokens: repeated ids exercise the scatter-add.
  return {s("2d_i64", 7, 4, Shape{2, 5}, DType::i64), s("1d_i32", 5, 3, Shape{6}, DType::i32),
          s("3d_i32", 4, 2, Shape{2, 3, 2}, DType::i32)};
}

std::vector<BadSample> embedding_bad() {
  Attrs a{{"num", int64_t{10}}, {"dim", int64_t{4}}};
  return {{"float_tokens", a, {TensorDesc{Shape{2, 5}}}, "integer token ids"},
          {"zero_dim", {{"num", int64_t{10}}, {"dim", int64_t{0}}}, {TensorDesc{Shape{2, 5}, DType::i32}},
           "must be at least 1"},
          {"no_num", {{"dim", int64_t{4}}}, {TensorDesc{Shape{2, 5}, DType::i32}}, "needs attribute 'num'"}};
}

// ---- embedding_dw(dy, tokens) -> dW [num, dim] ------------------------------------------------------------
std::vector<TensorDesc> embedding_dw_infer(const Attrs& a, std::span<const TensorDesc> in) {
  return {TensorDesc{Shape{a.i("num"), in[0].shape.back()}, in[0].dtype}};
}

// dW[tokens[i], :] += dy[i, :], tokens in order; threads own disjoint column ranges, so the summation order
// of every element is the token order whatever the thread count.
void embedding_dw_cpu(const KernelCtx&, const Attrs&, std::span<const Tensor> in, std::span<const Tensor> out) {
  const Tensor& tok = in[1];
  int64_t num = out[0].shape()[0], dim = out[0].shape()[1], n = tok.numel();
  for (int64_t i = 0; i < n; ++i) {
    int64_t t = cpu::int_at(tok, i);
    BRAID_ASSERT(t >= 0 && t < num, "embedding_dw: token id ", t, " outside [0, ", num, ")");
  }
  dispatch_float(out[0].dtype(), [&]<typename T>() {
    const T* dy = in[0].data<T>();
    T* dw = out[0].data<T>();
    std::fill_n(dw, num * dim, T(0));
    parallel_for(dim, std::max<int64_t>(8, (1 << 14) / std::max<int64_t>(n, 1)), [&](int64_t j0, int64_t j1) {
      for (int64_t i = 0; i < n; ++i) {
        T* row = dw + cpu::int_at(tok, i) * dim;
        const T* g = dy + i * dim;
        for (int64_t j = j0; j < j1; ++j) row[j] += g[j];
      }
    });
  });
}

std::vector<SplitSignature> embedding_dw_splits(const Attrs&, std::span<const TensorDesc> in,
                                                std::span<const TensorDesc> out) {
  int last = in[0].shape.rank() - 1;
  auto sigs = all_broadcast(in, out);
  for (int ax = 0; ax < last; ++ax)  // each device scatters its tokens: partial sums of dW
    sigs.push_back({ax == 0 ? "data" : "pos" + std::to_string(ax), {Sbp::S(ax), Sbp::S(ax)}, {Sbp::P()}});
  sigs.push_back({"column", {Sbp::S(last), Sbp::B()}, {Sbp::S(1)}});
  sigs.push_back({"partial", {Sbp::P(), Sbp::B()}, {Sbp::P()}});
  return sigs;
}

Cost scatter_cost(const Attrs&, std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
  Cost c = default_cost(in, out, 0);
  c.flops = static_cast<double>(in[0].numel());
  return c;
}

// ---- position_embedding -----------------------------------------------------------------------------------
void check_positions(const Attrs& a, const TensorDesc& x) {
  if (x.shape.rank() != 3)
    throw OpError("position_embedding needs x [batch, seq, features], got " + x.str(),
                  "per-sample shape [seq, features]; an embedding layer produces it from tokens [seq]");
  if (!is_float(x.dtype)) throw OpError("position_embedding input must be floating point, got " + x.str());
  if (x.shape[1] > a.i("max_len"))
    throw OpError("max_len " + str(a.i("max_len")) + " is shorter than the sequence " + str(x.shape[1]),
                  "set max_len to at least " + str(x.shape[1]) + " (e.g. max_len: seq)");
}

std::vector<ParamSpec> position_params(const Attrs& a, std::span<const TensorDesc> in) {
  if (in[0].shape.rank() != 3 || !is_float(in[0].dtype)) check_positions(a, in[0]);
  return {{"weight", {Shape{a.i("max_len"), in[0].shape.back()}, in[0].dtype}, InitSpec::normal(0, 1)}};
}

std::vector<TensorDesc> position_infer(const Attrs& a, std::span<const TensorDesc> in) {
  check_positions(a, in[0]);
  BRAID_ASSERT(in.size() == 2, "position_embedding takes x and weight");
  if (in[1].shape != Shape{a.i("max_len"), in[0].shape[2]} || in[1].dtype != in[0].dtype)
    throw OpError("position_embedding weight is " + in[1].str() + " but needs [" + str(a.i("max_len")) + ", " +
                  str(in[0].shape[2]) + "] for input " + in[0].str());
  return {in[0]};
}

// y[b, t, :] = x[b, t, :] + W[t, :]; x (B, T, d), W (>= T, d) row-major.
void position_cpu(const KernelCtx&, const Attrs&, std::span<const Tensor> in, std::span<const Tensor> out) {
  dispatch_float(out[0].dtype(), [&]<typename T>() {
    int64_t bt = in[0].shape()[0] * in[0].shape()[1], seq = in[0].shape()[1], d = in[0].shape()[2];
    BRAID_ASSERT(in[1].shape()[0] >= seq && in[1].shape()[1] == d, "position_embedding: weight ", in[1].desc().str(),
                 " for x ", in[0].desc().str());
    const T* x = in[0].data<T>();
    const T* w = in[1].data<T>();
    T* y = out[0].data<T>();
    parallel_for(bt, std::max<int64_t>(1, (1 << 14) / d), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T* wr = w + (r % seq) * d;
        for (int64_t j = 0; j < d; ++j) y[r * d + j] = x[r * d + j] + wr[j];
      }
    });
  });
}

void position_grad(GradCtx& c) {
  if (!c.dout[0].valid()) return;
  if (c.needs[0]) c.din[0] = c.dout[0];  // identity
  if (c.needs[1]) c.din[1] = c.g.emit("position_embedding_dw", {{"max_len", c.attrs.i("max_len")}}, {c.dout[0]})[0];
}

std::vector<SplitSignature> position_splits(const Attrs& a, std::span<const TensorDesc> in,
                                            std::span<const TensorDesc> out) {
  auto sigs = all_broadcast(in, out);
  sigs.push_back({"data", {Sbp::S(0), Sbp::B()}, {Sbp::S(0)}});
  // feature: each device holds d/n columns of the table and the matching features.
  sigs.push_back({"feature", {Sbp::S(2), Sbp::S(1)}, {Sbp::S(2)}});
  // seq: only when the sequence fills the table, so that equal shards of both cover the same positions.
  if (in[0].shape[1] == a.i("max_len")) sigs.push_back({"seq", {Sbp::S(1), Sbp::S(0)}, {Sbp::S(1)}});
  // partial: a sum is linear in both operands.
  sigs.push_back({"partial", {Sbp::P(), Sbp::P()}, {Sbp::P()}});
  return sigs;
}

std::vector<Sample> position_samples() {
  auto s = [](const std::string& name, int64_t max_len, Shape x) {
    return Sample{name, {{"max_len", max_len}}, {{TensorDesc{std::move(x)}}}};
  };
  return {s("longer_table", 8, Shape{2, 5, 4}), s("full_table", 4, Shape{3, 4, 6})};
}

std::vector<BadSample> position_bad() {
  Attrs a{{"max_len", int64_t{64}}};
  return {{"too_short", a, {TensorDesc{Shape{2, 128, 16}}}, "max_len 64 is shorter than the sequence 128"},
          {"rank2", a, {TensorDesc{Shape{2, 16}}}, "needs x [batch, seq, features]"},
          {"int", a, {TensorDesc{Shape{2, 8, 16}, DType::i32}}, "must be floating point"}};
}

// ---- position_embedding_dw(dy) -> dW [max_len, d] -----------------------------------------------------------
std::vector<TensorDesc> position_dw_infer(const Attrs& a, std::span<const TensorDesc> in) {
  return {TensorDesc{Shape{a.i("max_len"), in[0].shape[2]}, in[0].dtype}};
}

// dW[t, :] = sum over b (in order) of dy[b, t, :] for t < T; rows T.. are zero.
void position_dw_cpu(const KernelCtx&, const Attrs&, std::span<const Tensor> in, std::span<const Tensor> out) {
  dispatch_float(out[0].dtype(), [&]<typename T>() {
    int64_t nb = in[0].shape()[0], seq = in[0].shape()[1], d = in[0].shape()[2], rows = out[0].shape()[0];
    BRAID_ASSERT(rows >= seq, "position_embedding_dw: ", rows, " rows for a sequence of ", seq);
    const T* dy = in[0].data<T>();
    T* dw = out[0].data<T>();
    std::fill_n(dw + seq * d, (rows - seq) * d, T(0));
    parallel_for(seq, std::max<int64_t>(1, (1 << 14) / (d * nb)), [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        T* row = dw + t * d;
        std::fill_n(row, d, T(0));
        for (int64_t b = 0; b < nb; ++b)
          for (int64_t j = 0; j < d; ++j) row[j] += dy[(b * seq + t) * d + j];
      }
    });
  });
}

std::vector<SplitSignature> position_dw_splits(const Attrs& a, std::span<const TensorDesc> in,
                                               std::span<const TensorDesc> out) {
  auto sigs = all_broadcast(in, out);
  sigs.push_back({"data", {Sbp::S(0)}, {Sbp::P()}});
  sigs.push_back({"feature", {Sbp::S(2)}, {Sbp::S(1)}});
  if (in[0].shape[1] == a.i("max_len")) sigs.push_back({"seq", {Sbp::S(1)}, {Sbp::S(0)}});
  sigs.push_back({"partial", {Sbp::P()}, {Sbp::P()}});
  return sigs;
}

OpDef internal_def(const std::string& name, std::string doc, std::vector<AttrSpec> attrs, int inputs) {
  OpDef d = internal_op(name, std::move(doc), inputs);
  d.attrs = std::move(attrs);
  d.cost = scatter_cost;
  return d;
}

}  // namespace

void register_embedding(Registry& r) {
  AttrSpec num{"num", AttrKind::Int, std::nullopt, false, {}, 0, true, false, "number of ids (rows of the table)"};
  AttrSpec dim{"dim", AttrKind::Int, std::nullopt, false, {}, 0, true, false, "features per id"};
  AttrSpec max_len{"max_len", AttrKind::Int, std::nullopt, false, {}, 0, true, false, "longest sequence (rows)"};
  {
    OpDef d;
    d.name = "embedding";
    d.doc = "row lookup weight[tokens] (nn.Embedding); tokens [B, ...] -> [B, ..., dim]";
    d.attrs = {num, dim};
    d.nondiff_inputs = {0};
    d.params = embedding_params;
    d.infer = embedding_infer;
    d.grad = embedding_grad;
    d.splits = embedding_splits;
    d.cost = embedding_cost;
    d.int_bound = embedding_int_bound;
    d.cpu = embedding_cpu;
    d.samples = embedding_samples;
    d.bad_samples = embedding_bad;
    d.torch_rtol = 1e-6;  // the forward is a copy (bit-exact); the table's gradient may sum repeated ids in
    d.torch_atol = 1e-7;  // another order than PyTorch's
    r.add(d);
  }
  {
    OpDef d = internal_def("embedding_dw", "gradient of embedding w.r.t. its table: scatter-add of dy rows", {num}, 2);
    d.infer = embedding_dw_infer;
    d.cpu = embedding_dw_cpu;
    d.splits = embedding_dw_splits;
    r.add(d);
  }
  {
    OpDef d;
    d.name = "position_embedding";
    d.doc = "x + weight[0:T] (learned positions, initialised as nn.Embedding); x [B, T, d]";
    d.attrs = {max_len};
    d.params = position_params;
    d.infer = position_infer;
    d.grad = position_grad;
    d.splits = position_splits;
    d.cpu = position_cpu;
    d.samples = position_samples;
    d.bad_samples = position_bad;
    d.torch_rtol = 1e-6;  // the forward is one fp32 addition (bit-exact); the table's gradient sums the batch,
    d.torch_atol = 1e-7;  // perhaps in another order than PyTorch's
    r.add(d);
  }
  {
    OpDef d = internal_def("position_embedding_dw", "gradient of position_embedding w.r.t. its table", {max_len}, 1);
    d.infer = position_dw_infer;
    d.cpu = position_dw_cpu;
    d.splits = position_dw_splits;
    r.add(d);
  }
}

}  // namespace braid::ops
