// Arena layout, per-node tensor views prepared once (per slot), the run loop and the comm_* nodes.
#include "backends/cpu/executor.h"

#include <algorithm>
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

ChunkLayout chunk_layout(const Tensor& whole, const Tensor& part, int axis, int parts) {
  const auto& dims = whole.shape().dims();
  BRAID_ASSERT(axis >= 0 && axis < static_cast<int>(dims.size()) && dims[static_cast<size_t>(axis)] % parts == 0,
               "copy_chunk: axis ", axis, " of ", whole.desc().str(), " in ", parts, " parts");
  BRAID_ASSERT(part.numel() * parts == whole.numel(), "copy_chunk: ", part.desc().str(), " is not 1/", parts, " of ",
               whole.desc().str());
  int64_t outer = 1, inner = 1;
  for (int a = 0; a < axis; ++a) outer *= dims[static_cast<size_t>(a)];
  for (size_t a = static_cast<size_t>(axis) + 1; a < dims.size(); ++a) inner *= dims[a];
  const size_t chunk = static_cast<size_t>(dims[static_cast<size_t>(axis)] / parts * inner) * dtype_size(whole.dtype());
  return {static_cast<size_t>(outer), chunk, chunk * static_cast<size_t>(parts)};
}

void copy_chunk(const Tensor& in, const Tensor& out, int axis, int index, int parts, bool scatter) {
  const Tensor& whole = scatter ? out : in;
  const Tensor& part = scatter ? in : out;
  const ChunkLayout l = chunk_layout(whole, part, axis, parts);
  auto* w = static_cast<char*>(whole.raw());
  auto* p = static_cast<char*>(part.raw());
  for (size_t o = 0; o < l.outer; ++o) {
    char* wp = w + o * l.row + static_cast<size_t>(index) * l.chunk;
    char* pp = p + o * l.chunk;
    if (scatter)
      std::memcpy(wp, pp, l.chunk);
    else
      std::memcpy(pp, wp, l.chunk);
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
    ParamEntry* e = store_entry(params, v);
    return e ? e->value : Tensor::view(nullptr, v.desc);
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
      if (!linked || !f32 || widen_[i] || widen_[i + 1] || !mark_pair(i)) continue;
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

void Executor::begin_range(int, bool training, uint64_t run_key, int64_t batch_offset) {
  ctx_ = ops::KernelCtx{};
  ctx_.training = training;
  ctx_.workspace = workspace_.raw();
  ctx_.workspace_bytes = plan_.workspace_bytes;
  run_key_ = run_key;
  batch_offset_ = batch_offset;
}

void Executor::run_node(size_t i, int slot) {
  const graph::Node& n = g_.nodes()[i];
  const auto& in = node_in_[static_cast<size_t>(slot)][i];
  place_node(ctx_, i, run_key_, batch_offset_, in);
  if (widen_[i])
    run_widened(n, ctx_, in, node_out_[static_cast<size_t>(slot)][i]);
  else
    n.op->cpu(ctx_, n.attrs, in, node_out_[static_cast<size_t>(slot)][i]);
}

bool Executor::run_pair(size_t i, int slot) {
  const auto& ins = node_in_[static_cast<size_t>(slot)];
  const auto& outs = node_out_[static_cast<size_t>(slot)];
  const graph::Node &n = g_.nodes()[i], &next = g_.nodes()[i + 1];
  fusions_[i]->run(ctx_, n.attrs, *next.op, next.attrs, ins[i], ins[i + 1], outs[i][0], outs[i + 1][0]);
  return true;
}

}  // namespace braid::exec
