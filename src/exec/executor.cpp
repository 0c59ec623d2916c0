// Arena layout, per-node tensor views prepared once, and the run loop.
#include "exec/executor.h"

#include <algorithm>

#include <chrono>

#include "core/rng.h"

namespace braid::exec {

Executor::Executor(const graph::Graph& g, ParamStore& params, const std::vector<ValueId>& keep)
    : g_(g), plan_(plan_memory(g, keep)) {
  arena_ = Tensor::empty(TensorDesc{Shape{static_cast<int64_t>(std::max<size_t>(plan_.arena_bytes, 4) + 3) / 4}, DType::f32});
  if (plan_.workspace_bytes) workspace_ = Tensor::empty({Shape{static_cast<int64_t>((plan_.workspace_bytes + 3) / 4)}, DType::f32});
  views_.resize(g.values().size());
  auto* base = static_cast<char*>(arena_.raw());
  for (const auto& v : g.values()) {
    if (v.kind == graph::ValueKind::Param || v.kind == graph::ValueKind::Buffer) {
      ParamEntry* e = params.find(v.name);
      BRAID_ASSERT(e != nullptr, "parameter ", v.name, " is not in the store");
      views_[v.id.idx()] = e->value;
    } else {
      int64_t off = plan_.offset[v.id.idx()];
      BRAID_ASSERT(off >= 0, "value ", v.name, " has no place in the arena");
      views_[v.id.idx()] = Tensor::view(base + off, v.desc);
    }
  }
  for (const auto& n : g.nodes()) {
    std::vector<Tensor> in, out;
    for (ValueId v : n.inputs) in.push_back(views_[v.idx()]);
    for (ValueId v : n.outputs) out.push_back(views_[v.idx()]);
    BRAID_ASSERT(n.op->cpu != nullptr, "op ", n.op->name, " has no CPU kernel");
    node_in_.push_back(std::move(in));
    node_out_.push_back(std::move(out));
    node_keys_.push_back(name_hash(n.name));
  }
  first_backward_ = g.nodes().size();
  for (const auto& n : g.nodes()) {
    if (n.backward) {
      first_backward_ = std::min(first_backward_, n.id.idx());
      continue;
    }
    if (first_layer_.empty()) first_layer_ = n.layer;
    last_layer_ = n.layer;
  }
}

const Tensor& Executor::input(const std::string& name) const {
  ValueId v = g_.find_input(name);
  BRAID_ASSERT(v.valid(), "no model input named ", name);
  return views_[v.idx()];
}

void Executor::run(bool training, uint64_t seed, uint64_t rng_stream, int64_t batch_offset) {
  if (trace_) {  // the same run, bracketed by one forward and one backward event
    const auto& nodes = g_.nodes();
    io::TraceLabel f{io::TraceKind::Forward, first_layer_, last_layer_, {}, trace_mb_};
    trace_->begin(f);
    io::TraceLane* lane = trace_;
    trace_ = nullptr;
    run_range(training, seed, rng_stream, batch_offset, 0, first_backward_);
    lane->end();
    if (first_backward_ < nodes.size()) {
      io::TraceLabel b{io::TraceKind::Backward, first_layer_, last_layer_, {}, trace_mb_};
      lane->begin(b);
      run_range(training, seed, rng_stream, batch_offset, first_backward_, nodes.size());
      lane->end();
    }
    trace_ = lane;
    return;
  }
  run_range(training, seed, rng_stream, batch_offset, 0, g_.nodes().size());
}

void Executor::run_range(bool training, uint64_t seed, uint64_t rng_stream, int64_t batch_offset, size_t from,
                         size_t to) {
  ops::KernelCtx ctx;
  ctx.training = training;
  ctx.batch_offset = batch_offset;
  ctx.workspace = workspace_.raw();
  ctx.workspace_bytes = plan_.workspace_bytes;
  const uint64_t run_key = hash_key(seed, rng_stream);
  const auto& nodes = g_.nodes();
  if (node_seconds_ == nullptr) {
    for (size_t i = from; i < to; ++i) {
      ctx.rng_key = hash_key(run_key, node_keys_[i]);
      nodes[i].op->cpu(ctx, nodes[i].attrs, node_in_[i], node_out_[i]);
    }
    return;
  }
  using Clock = std::chrono::steady_clock;
  auto t0 = Clock::now();
  for (size_t i = from; i < to; ++i) {
    ctx.rng_key = hash_key(run_key, node_keys_[i]);
    nodes[i].op->cpu(ctx, nodes[i].attrs, node_in_[i], node_out_[i]);
    auto t1 = Clock::now();
    node_seconds_[i] += std::chrono::duration<double>(t1 - t0).count();
    t0 = t1;
  }
}

}  // namespace braid::exec
