// CudaExecutor: arena layout, per-node device views prepared once (per slot), the run loop and the comm_*
// nodes, following backends/cpu/executor.cpp step for step (see cuda_executor.h).
#include "backends/cuda/cuda_executor.h"

#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <functional>

#include "core/rng.h"
#include "backends/cuda/kernels/kernels.h"

namespace braid::exec {
namespace {
size_t align256(size_t n) { return (n + 255) / 256 * 256; }
}  // namespace

void device_copy_chunk(const cuda::Ctx& c, const Tensor& in, const Tensor& out, int axis, int index, int parts,
                       bool scatter) {
  const Tensor& whole = scatter ? out : in;
  const Tensor& part = scatter ? in : out;
  const ChunkLayout l = chunk_layout(whole, part, axis, parts);
  char* w = static_cast<char*>(whole.raw()) + static_cast<size_t>(index) * l.chunk;
  char* p = static_cast<char*>(part.raw());
  if (scatter) cuda::copy_2d(c, w, l.row, p, l.chunk, l.chunk, l.outer);
  else cuda::copy_2d(c, p, l.chunk, w, l.row, l.chunk, l.outer);
}

CudaExecutor::CudaExecutor(const graph::Graph& g, ParamStore& params, const std::vector<ValueId>& keep,
                           const ExecutorOptions& options, const CudaExecutorOptions& cuda_options)
    : NodeLoop(g, keep, options), params_(params), cuda_(cuda_options), keep_(keep) {
  BRAID_ASSERT(!(cuda_.bf16 && cuda_.f16), "CudaExecutorOptions: bf16 or f16 autocast, not both");
  // 1. Every node has a CUDA kernel (or is a collective); the largest workspace any node asks for.
  for (const auto& n : g.nodes()) {
    if (n.op->collective) {
      kernels_.push_back(nullptr);
      continue;
    }
    const ops::CudaOp* k = ops::cuda_op(*n.op);
    if (k == nullptr)
      throw UserError(SourceLoc{}, "op '" + n.op->name + "' (layer '" + n.layer + "') has no CUDA kernel",
                      "run this model on cpu devices, or add the op to src/backends/cuda/kernels");
    kernels_.push_back(reinterpret_cast<const void*>(&k->fn));
    std::vector<TensorDesc> in, out;
    for (ValueId v : n.inputs) in.push_back(g.value(v).desc);
    for (ValueId v : n.outputs) out.push_back(g.value(v).desc);
    const size_t ws = ops::cuda_workspace_bytes(*n.op, n.attrs, in, out);
    workspace_bytes_ = std::max(workspace_bytes_, ws);
    if (cuda_.autocast()) autocast_bytes_ = std::max(autocast_bytes_, ops::cuda_autocast_bytes(in, out, ws));
  }
  // Activations two or more GEMMs read whole (see lookup_): their 16-bit copies, per slot.
  std::vector<ValueId> act_copies;
  size_t act_copy_bytes = 0;
  if (cuda_.autocast() && activation_copies_allowed()) {
    std::vector<int> uses(g.values().size(), 0);
    for (const auto& n : g.nodes()) {
      const ops::CudaOp* k = n.op->collective ? nullptr : ops::cuda_op(*n.op);
      for (size_t i = 0; k && i < n.inputs.size() && i < 8 * sizeof(k->gemm_inputs); ++i)
        if (k->gemm_inputs >> i & 1u) ++uses[n.inputs[i].idx()];
    }
    for (const auto& v : g.values())
      if (uses[v.id.idx()] >= 2 && v.kind == graph::ValueKind::Activation && v.desc.dtype == DType::f32 &&
          v.producer.valid()) {
        act_copies.push_back(v.id);
        act_copy_bytes += align256(static_cast<size_t>(v.desc.numel()) * 2);
      }
  }
  // 2. One arena: shared activations, slots, parameters and buffers, workspace.
  const size_t shared = align256(plan_.arena_bytes), slot_bytes = align256(plan_.slot_bytes);
  size_t param_bytes = 0;
  for (const auto& v : g.values())
    if ((v.kind == graph::ValueKind::Param || v.kind == graph::ValueKind::Buffer) && !held_elsewhere(v)) {
      param_bytes += align256(v.desc.bytes());
      if (cuda_.autocast() && v.kind == graph::ValueKind::Param && v.desc.dtype == DType::f32)
        param_bytes += align256(static_cast<size_t>(v.desc.numel()) * 2);
    }
  const size_t total = shared + slot_bytes * static_cast<size_t>(options.slots) + param_bytes +
                       align256(workspace_bytes_) + align256(autocast_bytes_) +
                       act_copy_bytes * static_cast<size_t>(options.slots) + 4096;
  stream_ = std::make_unique<cuda::Stream>(cuda_.device);
  arena_ = std::make_unique<cuda::DeviceArena>(cuda_.device, total);
  char* base = static_cast<char*>(arena_->take(shared + slot_bytes * static_cast<size_t>(options.slots), "activations"));
  if (workspace_bytes_) workspace_ = arena_->take(workspace_bytes_, "workspace");
  if (autocast_bytes_) autocast_ = arena_->take(autocast_bytes_, "autocast");
  // 3. Views: activations at the plan's offsets; parameters and buffers in their own region.
  place_values(base, shared, slot_bytes, options.slots, [&](const graph::Value& v) {
    if (!store_entry(params, v)) return Tensor::view(nullptr, v.desc);
    Tensor d = Tensor::view(arena_->take(v.desc.bytes(), v.name.c_str()), v.desc);
    param_views_.emplace_back(params.index_of(v.name), d);
    if (cuda_.autocast() && v.kind == graph::ValueKind::Param && v.desc.dtype == DType::f32)
      shadows_.push_back({d.raw(), arena_->take(static_cast<size_t>(v.desc.numel()) * 2, "16-bit copy"), v.desc.numel()});
    return d;
  });
  staging_.assign(views_.size(), std::vector<Tensor>(g.values().size()));
  mirror_.assign(views_.size(), std::vector<Tensor>(g.values().size()));
  auto by_src = [](const cuda::Bf16Shadow& a, const cuda::Bf16Shadow& b) { return std::less<const void*>()(a.src, b.src); };
  std::sort(shadows_.begin(), shadows_.end(), by_src);
  // Per slot: the lookup (parameters' copies and the activations'), which copies to cast after each node, and which
  // to drop because the node writes their bytes.
  act_shadows_ = !act_copies.empty();
  lookup_.assign(views_.size(), shadows_);
  act_n_.assign(views_.size(), std::vector<int64_t>(shadows_.size(), 0));
  cast_after_.assign(views_.size(), std::vector<std::vector<size_t>>(g.nodes().size()));
  drop_after_.assign(views_.size(), std::vector<std::vector<size_t>>(g.nodes().size()));
  for (size_t sl = 0; sl < views_.size() && act_shadows_; ++sl) {
    std::vector<std::pair<cuda::Bf16Shadow, ValueId>> entries;
    for (const auto& p : shadows_) entries.push_back({p, ValueId()});
    for (ValueId v : act_copies) {
      const int64_t n = g.value(v).desc.numel();
      entries.push_back({cuda::Bf16Shadow{views_[sl][v.idx()].raw(), arena_->take(static_cast<size_t>(n) * 2, "16-bit activation copy"), 0}, v});
    }
    std::stable_sort(entries.begin(), entries.end(), [&](const auto& a, const auto& b) { return by_src(a.first, b.first); });
    auto& look = lookup_[sl];
    look.clear();
    act_n_[sl].clear();
    for (const auto& [e, v] : entries) {
      look.push_back(e);
      act_n_[sl].push_back(v.valid() ? g.value(v).desc.numel() : 0);
    }
    for (const auto& n : g.nodes())
      for (ValueId o : n.outputs) {
        const char* lo = static_cast<const char*>(views_[sl][o.idx()].raw());
        const char* hi = lo + g.value(o).desc.bytes();
        for (size_t k = 0; k < entries.size(); ++k) {
          if (!entries[k].second.valid()) continue;
          if (entries[k].second == o) {
            cast_after_[sl][n.id.idx()].push_back(k);
            continue;
          }
          const char* a = static_cast<const char*>(look[k].src);
          const char* b = a + act_n_[sl][k] * 4;
          if (lo < b && a < hi) drop_after_[sl][n.id.idx()].push_back(k);
        }
      }
  }
  for (const auto& in : g.inputs())
    for (auto& st : staging_) st[in.idx()] = Tensor::empty(g.value(in).desc);
  for (ValueId v : keep)
    for (auto& m : mirror_) m[v.idx()] = Tensor::empty(g.value(v).desc);
  index_nodes();
  for (const auto& n : g.nodes())
    if (n.loss_seed) loss_seed_ = n.id.idx();
  find_gelu_epilogues();
  upload_params();
}

bool CudaExecutor::run_pair(size_t i, int slot) {
  if (node_seconds_) return false;  // per-node times: each node its own
  const auto& outs = node_out_[static_cast<size_t>(slot)];
  if (ops::cuda_linear_gelu(ctx_, node_in_[static_cast<size_t>(slot)][i], outs[i][0], outs[i + 1][0])) {
    ++gelu_epilogue_runs_;
    return true;
  }
  fused_[i] = fused_[i + 1] = 0;  // cuBLASLt has no algorithm for it: two kernels from now on
  return false;
}

bool CudaExecutor::gelu_epilogue_allowed() {
  const char* v = std::getenv("BRAID_GELU_EPILOGUE");  // "0": linear and gelu run as two kernels (A/B)
  return !(v && std::string(v) == "0");
}

// Under autocast, a biased `linear` whose output only feeds the tanh-form `gelu` right after it (and, in training,
// gelu's backward) runs with it as one cuBLASLt call (GELU_AUX_BIAS: the pre-activation and the gelu both
// written). Not where the gelu's output shares bytes with the linear's operands or output (the memory plan may
// give a value dead after the linear to the gelu's output): the fused call reads those while it writes.
void CudaExecutor::find_gelu_epilogues() {
  if (!cuda_.autocast() || !gelu_epilogue_allowed()) return;
  const auto& nodes = g_.nodes();
  for (size_t i = 0; i + 1 < nodes.size(); ++i) {
    const graph::Node &a = nodes[i], &b = nodes[i + 1];
    if (ops::cuda_linear_gelu_pair(*a.op, *b.op, b.attrs) && a.inputs.size() == 3 && !b.inputs.empty() &&
        b.inputs[0] == a.outputs[0])
      mark_pair(i);
  }
}

CudaExecutor::~CudaExecutor() = default;

void CudaExecutor::upload_params() {
  for (const auto& [idx, d] : param_views_) stream_->upload(d.raw(), params_.entries()[idx].value.raw(), d.bytes());
  stream_->synchronize();
  shadows_fresh_ = false;
}

void CudaExecutor::set_loss_scale(double s) {
  BRAID_ASSERT(s == 1 || loss_seed_ != SIZE_MAX, "loss scaling needs a graph whose backward seeds the loss's gradient");
  BRAID_ASSERT(s > 0 && std::isfinite(s), "loss scale ", s, " is not a positive finite number");
  loss_scale_ = s;
}

void* CudaExecutor::autocast_shadow(const void* p) const {
  for (const auto& s : shadows_)
    if (s.src == p) return s.dst;
  return nullptr;
}

void CudaExecutor::refresh_shadows() {
  cuda::Ctx c = stream_->ctx();
  for (const auto& s : shadows_) cuda::cast(c, DType::f32, s.src, autocast_type(), s.dst, s.n);
  shadows_fresh_ = true;
}

void CudaExecutor::download_params() {
  for (const auto& [idx, d] : param_views_) stream_->download(params_.entries()[idx].value.raw(), d.raw(), d.bytes());
}

const Tensor& CudaExecutor::device_param(const std::string& name) const {
  size_t idx = params_.index_of(name);
  for (const auto& [i, d] : param_views_)
    if (i == idx) return d;
  BRAID_ASSERT(false, "parameter ", name, " is not used by this executor's graph");
  return param_views_.front().second;
}

const Tensor& CudaExecutor::input(const std::string& name, int slot) const {
  ValueId v = g_.find_input(name);
  BRAID_ASSERT(v.valid(), "no model input named ", name);
  return staging_.at(static_cast<size_t>(slot))[v.idx()];
}

const Tensor& CudaExecutor::value(ValueId v, int slot) const {
  const Tensor& m = mirror_.at(static_cast<size_t>(slot)).at(v.idx());
  BRAID_ASSERT(m.defined() && m.raw() != nullptr, "value ", g_.value(v).name,
               " is not kept by this CUDA executor (host mirrors exist for `keep` values only)");
  return m;
}

void CudaExecutor::fetch(ValueId v, const Tensor& out, int slot) const {
  const Tensor& d = device_value(v, slot);
  BRAID_ASSERT(out.desc() == d.desc(), "fetch: ", out.desc().str(), " for ", d.desc().str());
  stream_->download(out.raw(), d.raw(), d.bytes());
}

bool CudaExecutor::activation_copies_allowed() {
  const char* v = std::getenv("BRAID_ACTIVATION_COPIES");  // "0": every GEMM casts its activation operands (A/B)
  return !(v && std::string(v) == "0");
}

void CudaExecutor::set_device_fed(const std::vector<ValueId>& inputs) {
  device_fed_.assign(g_.values().size(), false);
  for (ValueId v : inputs)
    if (v.valid()) device_fed_[v.idx()] = true;
}

void CudaExecutor::stage_inputs(int slot) {
  auto& look = lookup_[static_cast<size_t>(slot)];
  const auto& act_n = act_n_[static_cast<size_t>(slot)];
  for (size_t k = 0; k < look.size(); ++k)  // a new run: no activation copy is current yet
    if (act_n[k] > 0) look[k].n = 0;
  for (const auto& in : g_.inputs()) {
    if (!device_fed_.empty() && device_fed_[in.idx()]) continue;
    const Tensor& h = staging_[static_cast<size_t>(slot)][in.idx()];
    stream_->upload(views_[static_cast<size_t>(slot)][in.idx()].raw(), h.raw(), h.bytes());
  }
}

void CudaExecutor::finish_run(int slot) {
  if (cuda_.mirror_keep)
    for (ValueId v : keep_) {
      const Tensor& m = mirror_[static_cast<size_t>(slot)][v.idx()];
      stream_->download(m.raw(), views_[static_cast<size_t>(slot)][v.idx()].raw(), m.bytes());
    }
  int bad = stream_->take_error_flag();  // synchronises
  if (bad & cuda::kBadToken)
    throw UserError(SourceLoc{}, "embedding: a token id is outside [0, num) of its embedding table",
                    "the data holds ids the embedding's 'num' does not cover; raise 'num' (the CPU run names the id)");
  if (bad & cuda::kBadTarget)
    throw UserError(SourceLoc{}, "cross_entropy: a target is outside [0, C) for its logits",
                    "class ids must be at least 0 and below the size of the logits' last axis");
}

void CudaExecutor::end_phase() { stream_->synchronize(); }

void CudaExecutor::ready_for_comm() { stream_->synchronize(); }
void CudaExecutor::copy_value(const Tensor& dst, const Tensor& src) { cuda::copy(stream_->ctx(), dst.raw(), src.raw(), src.bytes()); }
void CudaExecutor::zero_value(const Tensor& dst) { stream_->memset(dst.raw(), 0, dst.bytes()); }
void CudaExecutor::copy_part(const Tensor& x, const Tensor& y, int axis, int index, int parts) {
  device_copy_chunk(stream_->ctx(), x, y, axis, index, parts);
}

void CudaExecutor::begin_range(int slot, bool training, uint64_t run_key, int64_t batch_offset) {
  ctx_ = stream_->ctx();
  ctx_.training = training;
  ctx_.workspace = workspace_;
  ctx_.workspace_bytes = workspace_bytes_;
  ctx_.autocast = autocast_;
  ctx_.autocast_bytes = autocast_bytes_;
  ctx_.autocast_type = autocast_type();
  auto& look = lookup_[static_cast<size_t>(slot)];
  if (!look.empty()) {
    if (!shadows_fresh_) refresh_shadows();
    ctx_.shadows = look.data();
    ctx_.shadow_count = static_cast<int>(look.size());
  }
  run_key_ = run_key;
  batch_offset_ = batch_offset;
}

void CudaExecutor::run_node(size_t i, int slot) {
  const graph::Node& n = g_.nodes()[i];
  const auto& in = node_in_[static_cast<size_t>(slot)][i];
  const auto& out = node_out_[static_cast<size_t>(slot)][i];
  place_node(ctx_, i, run_key_, batch_offset_, in);
  (*static_cast<const ops::CudaKernel*>(kernels_[i]))(ctx_, n.attrs, in, out);
  if (i == loss_seed_ && loss_scale_ != 1)  // the scaled seed: d(S loss)/d(loss) = S
    cuda::fill(ctx_, out[0].dtype(), out[0].raw(), out[0].numel(), loss_scale_);
}

void CudaExecutor::after_node(size_t i, int slot) {
  if (!act_shadows_) return;
  auto& look = lookup_[static_cast<size_t>(slot)];
  for (size_t k : drop_after_[static_cast<size_t>(slot)][i]) look[k].n = 0;  // its bytes now hold another value
  for (size_t k : cast_after_[static_cast<size_t>(slot)][i]) {
    const int64_t n = act_n_[static_cast<size_t>(slot)][k];
    cuda::cast(ctx_, DType::f32, look[k].src, autocast_type(), look[k].dst, n);
    look[k].n = n;
  }
}

}  // namespace braid::exec
