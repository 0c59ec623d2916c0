// A tied weight's gradient is the sum of both uses (linear's `tie`, MODEL_FORMAT.md): a model whose head ties to its
// token embedding gets, for that one parameter, exactly the sum of the embedding's and the head's weight gradients of
// the same model untied with the head's weight set to the table, and the same loss.
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "backends/cpu/executor.h"
#include "graph/build.h"
#include "io/model_spec.h"

using namespace braid;

namespace {

graph::Graph training_graph(const std::string& head) {
  const std::string text = "inputs:\n  tokens: {shape: [5], dtype: i32}\n  targets: {shape: [5], dtype: i32}\n"
                           "layers:\n  - {name: tok, op: embedding, from: tokens, num: 10, dim: 6}\n"
                           "  - {name: mid, op: tanh}\n" +
                           head + "  - {name: loss, op: cross_entropy, from: [head, targets]}\noutputs: [loss]\n";
  Diagnostics diags;
  io::ModelSpec m = io::parse_model(text, "m.yaml", {}, diags);
  diags.throw_if_any();
  graph::BuildOptions bo;
  bo.with_backward = true;
  graph::Graph g = graph::build_graph(m, 3, bo, diags);
  diags.throw_if_any();
  return g;
}

struct Outcome {
  float loss = 0;
  std::map<std::string, std::vector<float>> grads;
};

Outcome run(const graph::Graph& g, exec::ParamStore& store) {
  std::vector<ValueId> keep{g.loss()};
  for (const auto& p : g.params()) keep.push_back(p.grad);
  exec::Executor ex(g, store, keep);
  int32_t* tokens = ex.input("tokens").data<int32_t>();
  int32_t* targets = ex.input("targets").data<int32_t>();
  for (int i = 0; i < 15; ++i) {
    tokens[i] = (7 * i + 3) % 10;
    targets[i] = (3 * i + 1) % 10;
  }
  ex.run(true, 1, 0);
  Outcome r;
  r.loss = ex.value(g.loss()).data<float>()[0];
  for (const auto& p : g.params()) {
    const Tensor& t = ex.value(p.grad);
    r.grads[p.name].assign(t.data<float>(), t.data<float>() + t.numel());
  }
  return r;
}

}  // namespace

TEST(TiedWeight, GradientIsTheSumOfBothUses) {
  const graph::Graph tied = training_graph("  - {name: head, op: linear, tie: tok, bias: false}\n");
  const graph::Graph untied = training_graph("  - {name: head, op: linear, out: 10, bias: false}\n");
  ASSERT_EQ(tied.params().size(), 1u);
  ASSERT_EQ(untied.params().size(), 2u);
  exec::ParamStore ts, us;
  ts.create(tied, 5);
  us.create(untied, 5);
  const Tensor& table = ts.find("tok.weight")->value;
  for (const char* name : {"tok.weight", "head.weight"}) {
    Tensor& w = us.find(name)->value;
    ASSERT_EQ(w.desc(), table.desc());
    std::memcpy(w.raw(), table.raw(), table.bytes());
  }
  const Outcome a = run(tied, ts), b = run(untied, us);
  EXPECT_EQ(a.loss, b.loss);
  const auto &sum = a.grads.at("tok.weight"), &emb = b.grads.at("tok.weight"), &head = b.grads.at("head.weight");
  ASSERT_EQ(sum.size(), 60u);
  bool both = false;
  for (size_t i = 0; i < sum.size(); ++i) {
    EXPECT_EQ(sum[i], emb[i] + head[i]) << "element " << i;
    both |= emb[i] != 0 && head[i] != 0;
  }
  EXPECT_TRUE(both) << "some elements get a gradient from both uses";
}
