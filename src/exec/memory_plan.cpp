// Greedy interval packing: values sorted by size (largest first) take the lowest offset free over
// their whole lifetime [definition, last use].
#include "exec/memory_plan.h"

#include <algorithm>

namespace braid::exec {

namespace {
constexpr size_t kAlign = 64;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
}  // namespace

std::vector<int> next_gathers(const graph::Graph& g) {
  const auto& nodes = g.nodes();
  std::vector<int> next(nodes.size(), -1);
  int prev = -1;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].op->collective_kind != ops::CollectiveKind::ParamGather) continue;
    if (prev >= 0 && nodes[static_cast<size_t>(prev)].backward == nodes[i].backward) next[static_cast<size_t>(prev)] = static_cast<int>(i);
    prev = static_cast<int>(i);
  }
  return next;
}

MemoryPlan plan_memory(const graph::Graph& g, const std::vector<ValueId>& keep) {
  return plan_memory(g, keep, std::vector<bool>(g.values().size(), false));
}

MemoryPlan plan_memory(const graph::Graph& g, const std::vector<ValueId>& keep, const std::vector<bool>& stash,
                       const std::vector<bool>& outside) {
  const auto& values = g.values();
  const int end = static_cast<int>(g.nodes().size());
  MemoryPlan plan;
  plan.offset.assign(values.size(), -1);
  std::vector<int> first(values.size(), -1), last(values.size(), -1);
  for (const auto& v : values) {
    if (v.kind == graph::ValueKind::Param || v.kind == graph::ValueKind::Buffer) continue;
    first[v.id.idx()] = v.kind == graph::ValueKind::Input ? -1 : v.producer.v;
    last[v.id.idx()] = first[v.id.idx()];
    for (NodeId c : v.consumers) last[v.id.idx()] = std::max(last[v.id.idx()], c.v);
    if (v.kind == graph::ValueKind::Input) last[v.id.idx()] = std::max(last[v.id.idx()], 0);
  }
  // A prefetched gather's output is written from the previous gather of its pass on (next_gathers).
  const std::vector<int> next = next_gathers(g);
  for (size_t i = 0; i < next.size(); ++i)
    if (next[i] >= 0) {
      const size_t out = g.nodes()[static_cast<size_t>(next[i])].outputs[0].idx();
      first[out] = std::min(first[out], static_cast<int>(i));
    }
  for (ValueId k : keep)
    if (first[k.idx()] != -1 || values[k.idx()].kind == graph::ValueKind::Input) last[k.idx()] = end;

  // In place (OpDef::in_place): output 0 of such a node takes input 0's bytes where input 0 is an activation of the
  // shared region whose last use is that node. root[v]: the value whose place v takes (v itself when none); the
  // root's lifetime grows to cover its chain.
  auto shared = [&](size_t i) {
    return values[i].kind == graph::ValueKind::Activation && (outside.empty() || !outside[i]) && !stash[i];
  };
  std::vector<size_t> root(values.size());
  for (size_t i = 0; i < values.size(); ++i) root[i] = i;
  for (const auto& n : g.nodes()) {
    if (!n.op->in_place || n.inputs.empty() || n.outputs.empty()) continue;
    const size_t in = n.inputs[0].idx(), out = n.outputs[0].idx();
    if (!shared(in) || !shared(out) || last[in] != n.id.v || values[in].desc.bytes() != values[out].desc.bytes() ||
        values[in].desc.dtype != values[out].desc.dtype)
      continue;
    root[out] = root[in];
    last[root[out]] = std::max(last[root[out]], last[out]);
  }

  std::vector<size_t> order;
  for (size_t i = 0; i < values.size(); ++i)
    if ((values[i].kind == graph::ValueKind::Activation || values[i].kind == graph::ValueKind::Input) &&
        (outside.empty() || !outside[i]) && root[i] == i)
      order.push_back(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return values[a].desc.bytes() > values[b].desc.bytes(); });

  struct Placed {
    size_t off, size;
    int first, last;
  };
  plan.in_slot.assign(values.size(), false);
  std::vector<Placed> placed_shared, placed_slot;
  for (size_t i : order) {
    const bool slot = stash[i];
    plan.in_slot[i] = slot;
    std::vector<Placed>& placed = slot ? placed_slot : placed_shared;
    size_t size = align_up(std::max<size_t>(values[i].desc.bytes(), 1));
    plan.naive_bytes += size;
    std::vector<std::pair<size_t, size_t>> busy;  // [off, off+size) of overlapping lifetimes
    for (const auto& p : placed)
      if (!(p.last < first[i] || last[i] < p.first)) busy.emplace_back(p.off, p.off + p.size);
    std::sort(busy.begin(), busy.end());
    size_t off = 0;
    for (const auto& [b, e] : busy) {
      if (off + size <= b) break;
      off = std::max(off, e);
    }
    placed.push_back({off, size, first[i], last[i]});
    plan.offset[i] = static_cast<int64_t>(off);
    size_t& region = slot ? plan.slot_bytes : plan.arena_bytes;
    region = std::max(region, off + size);
  }
  for (size_t i = 0; i < values.size(); ++i)
    if (root[i] != i) {
      plan.offset[i] = plan.offset[root[i]];
      plan.in_slot[i] = false;
    }
  for (const auto& n : g.nodes()) {
    if (!n.op->workspace) continue;
    // 16-bit values are sized as f32: the CPU runs such nodes on f32 copies (Executor, 16-bit values).
    auto wide = [&](ValueId v) {
      TensorDesc d = g.value(v).desc;
      d.dtype = master_dtype(d.dtype);
      return d;
    };
    std::vector<TensorDesc> in, out;
    for (ValueId v : n.inputs) in.push_back(wide(v));
    for (ValueId v : n.outputs) out.push_back(wide(v));
    plan.workspace_bytes = std::max(plan.workspace_bytes, n.op->workspace(n.attrs, in, out));
  }
  return plan;
}

}  // namespace braid::exec
