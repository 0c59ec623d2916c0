// The static memory plan: values whose lifetimes overlap never share bytes; reuse makes the arena
// smaller than one buffer per value on a chain.
#include <gtest/gtest.h>

#include "exec/memory_plan.h"
#include "graph/ir.h"
#include "ops/registry.h"

using namespace braid;
using namespace braid::graph;

TEST(MemoryPlan, OverlappingLifetimesNeverShareBytes) {
  Graph g(4);
  const auto& tanh = ops::Registry::get().at("tanh");  // not in place (relu is: ReluRunsInPlace below)
  ASSERT_FALSE(tanh.in_place);
  const auto& add = ops::Registry::get().at("add");
  ValueId x = g.add_input("x", TensorDesc{Shape{4, 256}});
  ValueId v = x;
  std::vector<ValueId> chain{x};
  for (int i = 0; i < 10; ++i) {
    v = g.add_node(tanh, {}, {v}, 1, "r" + std::to_string(i), "r", {}, false)[0];
    chain.push_back(v);
  }
  ValueId s = g.add_node(add, {}, {v, chain[3]}, 2, "skip", "skip", {}, false)[0];  // keeps r2 alive
  g.outputs.emplace_back("out", s);
  auto plan = exec::plan_memory(g, {s});
  // Lifetimes: [producer, last consumer] in node order; inputs start before node 0.
  auto span_of = [&](ValueId id) {
    const auto& val = g.value(id);
    int first = val.kind == ValueKind::Input ? -1 : val.producer.v, last = first;
    for (NodeId c : val.consumers) last = std::max(last, c.v);
    if (id == s) last = static_cast<int>(g.nodes().size());
    return std::pair<int, int>(first, last);
  };
  for (const auto& a : g.values())
    for (const auto& b : g.values()) {
      if (a.id >= b.id) continue;
      auto [fa, la] = span_of(a.id);
      auto [fb, lb] = span_of(b.id);
      bool live_together = !(la < fb || lb < fa);
      int64_t oa = plan.offset[a.id.idx()], ob = plan.offset[b.id.idx()];
      bool bytes_overlap = oa < ob + static_cast<int64_t>(b.desc.bytes()) && ob < oa + static_cast<int64_t>(a.desc.bytes());
      EXPECT_FALSE(live_together && bytes_overlap) << a.name << " and " << b.name;
    }
  EXPECT_LT(plan.arena_bytes, plan.naive_bytes / 2);
}

// In place (OpDef::in_place): an activation gradient writes over its incoming gradient where that gradient dies
// at the node, and never where it is still read later.
TEST(MemoryPlan, AnInPlaceGradientTakesTheBytesOfAnIncomingGradientThatDiesThere) {
  const auto& tanh = ops::Registry::get().at("tanh");  // not in place
  const auto& relu_grad = ops::Registry::get().at("relu_grad");
  const auto& add = ops::Registry::get().at("add");
  ASSERT_TRUE(relu_grad.in_place);
  for (bool dy_read_later : {false, true}) {
    Graph g(4);
    ValueId x = g.add_input("x", TensorDesc{Shape{4, 256}});
    ValueId z = g.add_node(tanh, {}, {x}, 1, "z", "z", {}, false)[0];
    ValueId dy = g.add_node(tanh, {}, {z}, 1, "dy", "dy", {}, false)[0];
    ValueId dx = g.add_node(relu_grad, {}, {dy, z}, 1, "dx", "dx", {}, false)[0];
    ValueId out = dy_read_later ? g.add_node(add, {}, {dx, dy}, 2, "sum", "sum", {}, false)[0]
                                : g.add_node(tanh, {}, {dx}, 1, "after", "after", {}, false)[0];
    g.outputs.emplace_back("out", out);
    auto plan = exec::plan_memory(g, {out});
    if (dy_read_later) {
      EXPECT_NE(plan.offset[dx.idx()], plan.offset[dy.idx()]);
    } else {
      EXPECT_EQ(plan.offset[dx.idx()], plan.offset[dy.idx()]);
      // dx lives on in dy's place: nothing born while dx lives may take those bytes.
      EXPECT_NE(plan.offset[out.idx()], plan.offset[dx.idx()]);
      EXPECT_NE(plan.offset[z.idx()], plan.offset[dx.idx()]);
    }
  }
}

// relu runs in place (OpDef::in_place; its gradient reads its output): a chain of relus over an activation takes
// one place, except where a value of the chain is still read later (the skip below keeps r2, so r3 cannot take
// its bytes); over a model input (not an activation of the arena) it does not.
TEST(MemoryPlan, ReluRunsInPlaceWhereItsInputDiesThere) {
  Graph g(4);
  const auto& relu = ops::Registry::get().at("relu");
  const auto& tanh = ops::Registry::get().at("tanh");
  const auto& add = ops::Registry::get().at("add");
  ASSERT_TRUE(relu.in_place);
  ValueId x = g.add_input("x", TensorDesc{Shape{4, 256}});
  ValueId h = g.add_node(tanh, {}, {x}, 1, "h", "h", {}, false)[0];
  ValueId r0 = g.add_node(relu, {}, {h}, 1, "r0", "r", {}, false)[0];
  std::vector<ValueId> r{r0};
  for (int i = 1; i < 6; ++i) r.push_back(g.add_node(relu, {}, {r.back()}, 1, "r" + std::to_string(i), "r", {}, false)[0]);
  ValueId s = g.add_node(add, {}, {r.back(), r[2]}, 2, "skip", "skip", {}, false)[0];
  ValueId on_input = g.add_node(relu, {}, {x}, 1, "on_input", "r", {}, false)[0];
  ValueId out = g.add_node(add, {}, {s, on_input}, 2, "out", "out", {}, false)[0];
  g.outputs.emplace_back("out", out);
  auto plan = exec::plan_memory(g, {out});
  auto at = [&](ValueId v) { return plan.offset[v.idx()]; };
  EXPECT_EQ(at(r0), at(h));
  EXPECT_EQ(at(r[1]), at(h));
  EXPECT_EQ(at(r[2]), at(h));
  EXPECT_NE(at(r[3]), at(r[2]));  // r2 is read again by the skip
  EXPECT_EQ(at(r[4]), at(r[3]));
  EXPECT_EQ(at(r[5]), at(r[3]));
  EXPECT_NE(at(on_input), at(x));
}
