// NodeLoop (node_loop.h): the value and node tables every executor builds the same way.
#include "exec/node_loop.h"

#include <algorithm>
#include <chrono>

#include "core/rng.h"
#include "backends/cpu/executor.h"

namespace braid::exec {

namespace {
// Values whose memory the caller provides (ExecutorOptions::external): no place in the arena.
std::vector<bool> outside(const graph::Graph& g, const ExecutorOptions& options) {
  std::vector<bool> out(g.values().size(), false);
  for (const auto& [v, t] : options.external) out.at(v.idx()) = true;
  return out;
}
}  // namespace

NodeLoop::NodeLoop(const graph::Graph& g, const std::vector<ValueId>& keep, const ExecutorOptions& options)
    : g_(g),
      plan_(plan_memory(g, keep, options.stash.empty() ? std::vector<bool>(g.values().size(), false) : options.stash,
                        outside(g, options))),
      outside_(outside(g, options)),
      param_owner_(options.param_owner),
      replica_(options.replica) {
  BRAID_ASSERT(options.slots >= 1, "an executor needs at least one slot");
  // ZeRO-3: each parameter gather's root, the replica holding the parameter.
  gather_root_.assign(g.nodes().size(), -1);
  for (const auto& n : g.nodes())
    if (n.op->collective_kind == ops::CollectiveKind::ParamGather) {
      BRAID_ASSERT(param_owner_, "comm_gather_param without ZeRO-3's parameter owners (", n.name, ")");
      gather_root_[n.id.idx()] = param_owner_->at(n.attrs.s("param"));
    }
  next_gather_ = next_gathers(g);
  gather_ticket_.assign(g.nodes().size(), 0);
  fused_.assign(g.nodes().size(), 0);
}

ParamEntry* NodeLoop::store_entry(ParamStore& store, const graph::Value& v) const {
  if (held_elsewhere(v)) return nullptr;  // ZeRO-3: only comm_gather_param reads it, on its root
  ParamEntry* e = store.find(v.name);
  BRAID_ASSERT(e != nullptr, "parameter ", v.name, " is not in the store");
  BRAID_ASSERT(e->value.desc() == v.desc, "parameter ", v.name, " is ", e->value.desc().str(), " in the store but ",
               v.desc.str(), " in the graph");
  return e;
}

bool NodeLoop::mark_pair(size_t i) {
  const graph::Node &a = g_.nodes()[i], &b = g_.nodes()[i + 1];
  if (fused_[i] != 0 || a.backward != b.backward) return false;
  // Placement is the same in every slot (a slot's region repeats slot 0's layout), so slot 0 decides.
  auto overlaps = [&](ValueId x, ValueId y) { return shares_bytes(views_[0][x.idx()], views_[0][y.idx()]); };
  auto same = [&](ValueId x, ValueId y) {
    const Tensor &p = views_[0][x.idx()], &q = views_[0][y.idx()];
    return p.raw() == q.raw() && p.bytes() == q.bytes();
  };
  for (ValueId out : b.outputs) {
    for (ValueId v : a.inputs)
      if (overlaps(out, v)) return false;
    for (ValueId v : a.outputs)
      if (overlaps(out, v) && !(b.op->in_place && out == b.outputs[0] && v == b.inputs[0] && same(out, v)))
        return false;
  }
  for (size_t k = 1; k < b.inputs.size(); ++k)  // the tail's other inputs are read by the head's threads' epilogues
    for (ValueId v : a.outputs)
      if (overlaps(b.inputs[k], v)) return false;
  fused_[i] = 1;
  fused_[i + 1] = 2;
  return true;
}

void NodeLoop::run_range(int slot, bool training, uint64_t seed, uint64_t rng_stream, int64_t batch_offset,
                         size_t from, size_t to) {
  begin_range(slot, training, hash_key(seed, rng_stream), batch_offset);
  using Clock = std::chrono::steady_clock;
  auto t0 = node_seconds_ ? Clock::now() : Clock::time_point{};
  bool tail = false;  // node i ran with the one before it
  for (size_t i = from; i < to; ++i) {
    if (tail) tail = false;
    else if (fused_[i] == 1 && i + 1 < to && run_pair(i, slot)) tail = true;
    else if (g_.nodes()[i].op->collective) run_collective(i, slot);
    else run_node(i, slot);
    after_node(i, slot);
    if (after_node_) {
      ready_for_comm();  // the hook may read this node's outputs
      (*after_node_)(i);
    }
    if (node_seconds_) {
      ready_for_comm();  // an accelerator: the node's own time
      auto t1 = Clock::now();
      node_seconds_[i] += std::chrono::duration<double>(t1 - t0).count();
      t0 = t1;
    }
  }
  finish_gathers();
}

bool NodeLoop::held_elsewhere(const graph::Value& v) const {
  if (!param_owner_) return false;
  auto it = param_owner_->find(v.name);
  return it != param_owner_->end() && it->second != replica_;
}

void NodeLoop::place_values(char* base, size_t shared, size_t slot_bytes, int slots,
                            const std::function<Tensor(const graph::Value&)>& param) {
  views_.assign(static_cast<size_t>(slots), std::vector<Tensor>(g_.values().size()));
  for (const auto& v : g_.values()) {
    if (v.kind == graph::ValueKind::Param || v.kind == graph::ValueKind::Buffer) {
      const Tensor t = param(v);
      for (auto& views : views_) views[v.id.idx()] = t;
      continue;
    }
    if (outside_[v.id.idx()]) continue;  // the caller's tensor (ExecutorOptions::external), set after this
    const int64_t off = plan_.offset[v.id.idx()];
    BRAID_ASSERT(off >= 0, "value ", v.name, " has no place in the arena");
    const bool in_slot = !plan_.in_slot.empty() && plan_.in_slot[v.id.idx()];
    for (size_t s = 0; s < views_.size(); ++s) {
      const size_t at = in_slot ? shared + s * slot_bytes + static_cast<size_t>(off) : static_cast<size_t>(off);
      views_[s][v.id.idx()] = Tensor::view(base + at, v.desc);
    }
  }
}

void NodeLoop::index_nodes() {
  node_in_.assign(views_.size(), {});
  node_out_.assign(views_.size(), {});
  for (size_t s = 0; s < views_.size(); ++s)
    for (const auto& n : g_.nodes()) {
      std::vector<Tensor> in, out;
      for (ValueId v : n.inputs) in.push_back(views_[s][v.idx()]);
      for (ValueId v : n.outputs) out.push_back(views_[s][v.idx()]);
      node_in_[s].push_back(std::move(in));
      node_out_[s].push_back(std::move(out));
    }
  node_keys_.clear();
  for (const auto& n : g_.nodes()) node_keys_.push_back(name_hash(graph::rng_name(n)));
  first_backward_ = g_.nodes().size();
  for (const auto& n : g_.nodes()) {
    if (n.backward) {
      first_backward_ = std::min(first_backward_, n.id.idx());
      continue;
    }
    if (n.op->collective) continue;
    if (first_layer_.empty()) first_layer_ = n.layer;
    last_layer_ = n.layer;
  }
}

void NodeLoop::set_groups(Communicator* tensor, Communicator* data) {
  tensor_comm_ = tensor;
  data_comm_ = data;
  tensor_rank_ = tensor ? tensor->rank() : 0;
  tensor_size_ = tensor ? tensor->size() : 1;
}

Communicator& NodeLoop::group_of(const graph::Node& n) const {
  Communicator* comm = n.attrs.s("group") == "data" ? data_comm_ : tensor_comm_;
  const int parts = static_cast<int>(n.attrs.i("parts"));
  BRAID_ASSERT(comm != nullptr && comm->size() == parts, "node ", n.name, " (", n.op->name, ") needs a ",
               n.attrs.s("group"), " group of ", parts, " devices, the executor has ",
               comm ? std::to_string(comm->size()) : "none");
  return *comm;
}

void NodeLoop::gather_param(size_t i, int slot, Communicator& comm) {
  const Tensor& x = node_in_[static_cast<size_t>(slot)][i][0];
  Tensor y = node_out_[static_cast<size_t>(slot)][i][0];
  const int root = gather_root_[i];
  if (comm.rank() == root) {
    copy_value(y, x);
    ready_for_comm();
  }
  comm.broadcast(y, root);
}

void NodeLoop::start_gather(size_t i, int slot) {
  if (gather_ticket_[i] != 0) return;
  gather_ticket_[i] = queue_->submit([this, i, slot]() {
    const Tensor& y = node_out_[static_cast<size_t>(slot)][i][0];
    io::TraceScope scope(queue_->lane(), io::TraceLabel{io::TraceKind::Collective, {}, {}, "gather " +
                                                         g_.nodes()[i].attrs.s("param"), trace_mb_, -1,
                                                         static_cast<double>(y.bytes())});
    try {
      gather_param(i, slot, *gather_comm_);
    } catch (...) {
      gather_comm_->abort("a parameter gather failed");
      throw;
    }
  });
}

void NodeLoop::finish_gathers() {
  if (!queue_) return;
  for (uint64_t& t : gather_ticket_)
    if (t != 0) {
      queue_->wait(t);
      t = 0;
    }
}

void NodeLoop::run_collective(size_t i, int slot) {
  const graph::Node& n = g_.nodes()[i];
  const std::vector<Tensor>& in = node_in_[static_cast<size_t>(slot)][i];
  const std::vector<Tensor>& out = node_out_[static_cast<size_t>(slot)][i];
  using K = ops::CollectiveKind;
  if (n.op->collective_kind == K::ParamGather && queue_) {
    // On the communication thread: this gather (unless its prefetch started it), then the next of the pass while
    // the nodes before it run; the memory plan keeps the next one's bytes free from here on (next_gathers).
    BRAID_ASSERT(gather_comm_ && gather_comm_->size() == static_cast<int>(n.attrs.i("parts")),
                 "node ", n.name, " needs a gather group of ", n.attrs.i("parts"), " devices");
    ready_for_comm();  // everything before this node is done: its bytes and the next gather's are free
    start_gather(i, slot);
    if (next_gather_[i] >= 0) start_gather(static_cast<size_t>(next_gather_[i]), slot);
    io::TraceScope scope(trace_, io::TraceLabel{io::TraceKind::Collective, {}, {}, "wait gather", trace_mb_});
    queue_->wait(gather_ticket_[i]);
    gather_ticket_[i] = 0;
    return;
  }
  Communicator* comm = &group_of(n);
  const std::string& op = n.op->name;  // for messages and traces
  io::TraceScope scope(trace_, io::TraceLabel{io::TraceKind::Collective, {}, {}, op, trace_mb_, -1,
                                              static_cast<double>(in[0].bytes())});
  const Tensor& x = in[0];
  Tensor y = out[0];
  ready_for_comm();  // everything before this node is done
  switch (n.op->collective_kind) {
    case K::Slice:
      copy_part(x, y, static_cast<int>(n.attrs.i("axis")), comm->rank(), static_cast<int>(n.attrs.i("parts")));
      break;
    case K::AllGather:
      comm->all_gather(x, y, static_cast<int>(n.attrs.i("axis")));
      break;
    case K::AllReduce:
      if (y.raw() != x.raw()) {
        copy_value(y, x);
        ready_for_comm();
      }
      comm->all_reduce(y, ReduceOp::Sum);
      break;
    case K::ReduceScatter:
      comm->reduce_scatter(x, y, static_cast<int>(n.attrs.i("axis")), ReduceOp::Sum);
      break;
    case K::Copy:
      copy_value(y, x);
      break;
    case K::ToPartial:
      if (comm->rank() == 0) copy_value(y, x);
      else zero_value(y);
      break;
    case K::ParamGather:  // ZeRO-3: the parameter from the replica holding it, into this node's value
      gather_param(i, slot, *comm);
      break;
    case K::None:
      BRAID_ASSERT(false, "communication op ", op, " names no collective");
  }
}

void NodeLoop::run(bool training, uint64_t seed, uint64_t rng_stream, int64_t batch_offset) {
  begin_run(0);
  if (trace_) {
    {
      io::TraceScope f(trace_, phase(io::TraceKind::Forward));
      run_range(0, training, seed, rng_stream, batch_offset, 0, first_backward_);
      end_phase();
    }
    if (has_backward()) {
      io::TraceScope b(trace_, phase(io::TraceKind::Backward));
      run_range(0, training, seed, rng_stream, batch_offset, first_backward_, g_.nodes().size());
      end_phase();
    }
  } else {
    run_range(0, training, seed, rng_stream, batch_offset, 0, g_.nodes().size());
  }
  end_run(0);
}

void NodeLoop::run_forward(int slot, uint64_t seed, uint64_t rng_stream, int64_t batch_offset, bool training) {
  begin_run(slot);
  io::TraceScope scope(trace_, phase(io::TraceKind::Forward));
  run_range(slot, training, seed, rng_stream, batch_offset, 0, first_backward_);
  end_phase();
}

void NodeLoop::run_backward(int slot, uint64_t seed, uint64_t rng_stream, int64_t batch_offset) {
  io::TraceScope scope(trace_, phase(io::TraceKind::Backward));
  run_range(slot, true, seed, rng_stream, batch_offset, first_backward_, g_.nodes().size());
  end_run(slot);
}

}  // namespace braid::exec
