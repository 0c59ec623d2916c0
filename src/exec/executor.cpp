// Arena layout, per-node tensor views prepared once (per slot), the run loop and the comm_* nodes.
#include "exec/executor.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "core/rng.h"
#include "ops/cpu/fused.h"
#include "ops/cpu/kernel_util.h"

namespace braid::exec {
namespace {
size_t align64(size_t n) { return (n + 63) / 64 * 64; }

// BRAID_FUSION=0 turns fusion off for A/B runs; read once per process.
bool fusion_allowed_by_env() {
  static const bool allowed = [] {
    const char* env = std::getenv("BRAID_FUSION");
    if (env && std::string_view(env) != "0" && std::string_view(env) != "1")
      std::fprintf(stderr, "braid: warning: BRAID_FUSION=%s is neither 0 (off) nor 1 (on, the default); fusing\n", env);
    return !(env && std::string_view(env) == "0");
  }();
  return allowed;
}
}  // namespace

void copy_chunk(const Tensor& in, const Tensor& out, int axis, int index, int parts, bool scatter) {
  const Tensor& whole = scatter ? out : in;
  const Tensor& part = scatter ? in : out;
  const auto& dims = whole.shape().dims();
  BRAID_ASSERT(axis >= 0 && axis < static_cast<int>(dims.size()) && dims[static_cast<size_t>(axis)] % parts == 0,
               "copy_chunk: axis ", axis, " of ", whole.desc().str(), " in ", parts, " parts");
  BRAID_ASSERT(part.numel() * parts == whole.numel(), "copy_chunk: ", part.desc().str(), " is not 1/", parts, " of ",
               whole.desc().str());
  size_t elem = dtype_size(whole.dtype());
  int64_t outer = 1, inner = 1;
  for (int a = 0; a < axis; ++a) outer *= dims[static_cast<size_t>(a)];
  for (size_t a = static_cast<size_t>(axis) + 1; a < dims.size(); ++a) inner *= dims[a];
  const size_t chunk = static_cast<size_t>(dims[static_cast<size_t>(axis)] / parts * inner) * elem;
  const size_t row = chunk * static_cast<size_t>(parts);
  auto* w = static_cast<char*>(whole.raw());
  auto* p = static_cast<char*>(part.raw());
  for (int64_t o = 0; o < outer; ++o) {
    char* wp = w + static_cast<size_t>(o) * row + static_cast<size_t>(index) * chunk;
    char* pp = p + static_cast<size_t>(o) * chunk;
    if (scatter)
      std::memcpy(wp, pp, chunk);
    else
      std::memcpy(pp, wp, chunk);
  }
}

Executor::Executor(const graph::Graph& g, ParamStore& params, const std::vector<ValueId>& keep,
                   const ExecutorOptions& options)
    : NodeLoop(g, keep, options) {
  const size_t shared = align64(plan_.arena_bytes), slot_bytes = align64(plan_.slot_bytes);
  const size_t total = shared + slot_bytes * static_cast<size_t>(options.slots);
  arena_ = Tensor::empty(TensorDesc{Shape{static_cast<int64_t>(std::max<size_t>(total, 4) + 3) / 4}, DType::f32});
  if (plan_.workspace_bytes) workspace_ = Tensor::empty({Shape{static_cast<int64_t>((plan_.workspace_bytes + 3) / 4)}, DType::f32});
  place_values(static_cast<char*>(arena_.raw()), shared, slot_bytes, options.slots, [&](const graph::Value& v) {
    if (held_elsewhere(v)) return Tensor::view(nullptr, v.desc);  // only comm_gather_param reads it, on its root
    ParamEntry* e = params.find(v.name);
    BRAID_ASSERT(e != nullptr, "parameter ", v.name, " is not in the store");
    BRAID_ASSERT(e->value.desc() == v.desc, "parameter ", v.name, " is ", e->value.desc().str(), " in the store but ",
                 v.desc.str(), " in the graph");
    return e->value;
  });
  BRAID_ASSERT(options.external.empty() || options.slots == 1, "external values need a single slot");
  for (const auto& [v, t] : options.external) {
    const graph::Value& val = g.value(v);
    BRAID_ASSERT(val.kind != graph::ValueKind::Param && val.kind != graph::ValueKind::Buffer &&
                     t.desc() == val.desc && t.defined(),
                 "external tensor ", t.desc().str(), " for value ", val.name, " (", val.desc.str(), ")");
    views_[0][v.idx()] = t;
  }
  index_nodes();
  for (const auto& n : g.nodes())
    BRAID_ASSERT(n.op->cpu != nullptr || n.op->collective, "op ", n.op->name, " has no CPU kernel");
  // Graphs with 16-bit values (graph::BuildOptions::half): the CPU kernels are f32/f64, so a node that touches
  // bf16 or f16 values (but cast) runs on f32 copies of them, its 16-bit outputs rounded back (round to nearest
  // even): the values the GPU computes, rounded at the same places. A reference path, not a fast one.
  widen_.assign(g.nodes().size(), 0);
  for (const auto& n : g.nodes()) {
    if (n.op->any_float || n.op->collective) continue;
    bool half = false;
    for (ValueId v : n.inputs) half = half || is_half(g.value(v).desc.dtype);
    for (ValueId v : n.outputs) half = half || is_half(g.value(v).desc.dtype);
    widen_[n.id.idx()] = half ? 1 : 0;
  }
  fuse_.assign(g.nodes().size(), 0);
  fusions_.assign(g.nodes().size(), nullptr);
  if (options.fuse && fusion_allowed_by_env())
    for (size_t i = 0; i + 1 < g.nodes().size(); ++i) {
      const graph::Node &a = g.nodes()[i], &b = g.nodes()[i + 1];
      const bool f32 = g.value(a.outputs[0]).desc.dtype == DType::f32 && g.value(b.outputs[0]).desc.dtype == DType::f32;
      // The pairs the CPU kernels fuse (ops::cpu::cpu_fusion: linear + the activation of its output, linear_dw +
      // linear_db of the same dy), wired as the fusion needs.
      const ops::cpu::CpuFusion* f = ops::cpu::cpu_fusion(*a.op, *b.op);
      const bool linked =
          f && (f->link == ops::cpu::FusionLink::TailReadsHeadOutput ? !b.inputs.empty() && b.inputs[0] == a.outputs[0]
                                                                    : b.inputs.size() == 1 && b.inputs[0] == a.inputs[0]);
      if (fuse_[i] != 0 || !linked || a.backward != b.backward || !f32 || widen_[i] || widen_[i + 1]) continue;
      // The second node's outputs are written while the first node's threads still read its inputs and write
      // its outputs, so none of them may share bytes: the memory plan may have placed an output of the second
      // node in the bytes of a value whose last reader is the first node (an eval graph's linear input). The one
      // exception: an in-place tail (OpDef::in_place) whose output is exactly the head's output it reads, which
      // the fused epilogue rewrites block by block after the head wrote it.
      auto overlaps = [&](ValueId x, ValueId y) { return shares_bytes(views_[0][x.idx()], views_[0][y.idx()]); };
      auto same = [&](ValueId x, ValueId y) {
        const Tensor &p = views_[0][x.idx()], &q = views_[0][y.idx()];
        return p.raw() == q.raw() && p.bytes() == q.bytes();
      };
      bool shares = false;
      for (ValueId out : b.outputs) {
        for (ValueId v : a.inputs) shares = shares || overlaps(out, v);
        for (ValueId v : a.outputs)
          shares = shares || (overlaps(out, v) && !(b.op->in_place && out == b.outputs[0] && v == b.inputs[0] && same(out, v)));
      }
      for (size_t k = 1; k < b.inputs.size(); ++k)  // the tail's other inputs are read by the head's threads' epilogues
        for (ValueId v : a.outputs) shares = shares || overlaps(b.inputs[k], v);
      if (shares) continue;
      fuse_[i] = 1;
      fuse_[i + 1] = 2;
      fusions_[i] = f;
      fused_heads_.push_back(i);
    }
}

const Tensor& Executor::input(const std::string& name, int slot) const {
  ValueId v = g_.find_input(name);
  BRAID_ASSERT(v.valid(), "no model input named ", name);
  return views_.at(static_cast<size_t>(slot))[v.idx()];
}

void Executor::copy_value(const Tensor& dst, const Tensor& src) { Tensor(dst).copy_from(src); }
void Executor::zero_value(const Tensor& dst) { std::memset(dst.raw(), 0, dst.bytes()); }
void Executor::copy_part(const Tensor& x, const Tensor& y, int axis, int index, int parts) {
  copy_chunk(x, y, axis, index, parts);
}

void Executor::run_widened(const graph::Node& n, const ops::KernelCtx& ctx, const std::vector<Tensor>& in,
                           const std::vector<Tensor>& out) {
  auto widened = [](const Tensor& t) {
    return is_half(t.dtype()) ? Tensor::empty({t.shape(), DType::f32}) : t;
  };
  std::vector<Tensor> win, wout;
  for (const Tensor& t : in) {
    win.push_back(widened(t));
    if (is_half(t.dtype())) convert_float(t, win.back());
  }
  for (const Tensor& t : out) wout.push_back(widened(t));  // kernels write every element of their outputs
  n.op->cpu(ctx, n.attrs, win, wout);
  for (size_t k = 0; k < out.size(); ++k)
    if (is_half(out[k].dtype())) convert_float(wout[k], out[k]);
}

void Executor::run_range(int slot, bool training, uint64_t seed, uint64_t rng_stream, int64_t batch_offset,
                         size_t from, size_t to) {
  ops::KernelCtx ctx;
  ctx.training = training;
  ctx.workspace = workspace_.raw();
  ctx.workspace_bytes = plan_.workspace_bytes;
  const uint64_t run_key = hash_key(seed, rng_stream);
  const auto& nodes = g_.nodes();
  const auto& ins = node_in_[static_cast<size_t>(slot)];
  const auto& outs = node_out_[static_cast<size_t>(slot)];
  using Clock = std::chrono::steady_clock;
  auto t0 = node_seconds_ ? Clock::now() : Clock::time_point{};
  for (size_t i = from; i < to; ++i) {
    const graph::Node& n = nodes[i];
    if (fuse_[i] == 1 && i + 1 < to) {
      const graph::Node& next = nodes[i + 1];
      fusions_[i]->run(ctx, n.attrs, *next.op, next.attrs, ins[i], ins[i + 1], outs[i][0], outs[i + 1][0]);
    } else if (fuse_[i] == 2 && i > from) {
      // ran with the node before it
    } else if (n.op->collective) {
      run_collective(i, slot);
    } else {
      place_node(ctx, i, run_key, batch_offset, ins[i]);
      if (widen_[i])
        run_widened(n, ctx, ins[i], outs[i]);
      else
        n.op->cpu(ctx, n.attrs, ins[i], outs[i]);
    }
    if (after_node_) (*after_node_)(i);
    if (node_seconds_) {
      auto t1 = Clock::now();
      node_seconds_[i] += std::chrono::duration<double>(t1 - t0).count();
      t0 = t1;
    }
  }
  finish_gathers();
}

}  // namespace braid::exec
