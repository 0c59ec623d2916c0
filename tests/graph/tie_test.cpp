// linear's `tie: LAYER` (MODEL_FORMAT.md): the tied head takes the named layer's weight as its input instead of a
// parameter of its own, so the graph holds one parameter, under the named layer's name, whose gradient is the sum
// of both uses; every mistake is reported at the tying layer.
#include <gtest/gtest.h>

#include <set>

#include "graph/build.h"
#include "graph/print.h"
#include "io/model_spec.h"

using namespace braid;

namespace {

struct Built {
  graph::Graph g{2};
  std::vector<Diagnostic> errors;
};

Built build(const std::string& layers) {
  const std::string text = R"(inputs:
  tokens: {shape: [5], dtype: i32}
  targets: {shape: [5], dtype: i32}
layers:
)" + layers + "outputs: [loss]\n";
  Diagnostics diags;
  io::ModelSpec m = io::parse_model(text, "m.yaml", {}, diags);
  graph::BuildOptions bo;
  bo.with_backward = true;
  Built b;
  b.g = graph::build_graph(m, 2, bo, diags);
  b.errors = diags.all();
  return b;
}

std::string all_text(const std::vector<Diagnostic>& d) {
  std::string s;
  for (const auto& x : d) s += x.format() + "\n";
  return s;
}

const graph::Node& node_named(const graph::Graph& g, const std::string& name) {
  for (const auto& n : g.nodes())
    if (n.name == name) return n;
  throw std::runtime_error("no node " + name);
}

// The error of a model whose layer on line 6 ties: exactly one, at `where`, holding `fragment`.
void expect_error(const std::string& layers, const std::string& where, const std::string& fragment) {
  Built b = build(layers);
  ASSERT_EQ(b.errors.size(), 1u) << all_text(b.errors);
  EXPECT_EQ(b.errors[0].loc.str(), where) << all_text(b.errors);
  EXPECT_NE((b.errors[0].message + " " + b.errors[0].hint).find(fragment), std::string::npos) << all_text(b.errors);
}

const char* kTok = "  - {name: tok, op: embedding, from: tokens, num: 10, dim: 6}\n";
const char* kLoss = "  - {name: loss, op: cross_entropy, from: [head, targets]}\n";

}  // namespace

TEST(Tie, TiedHeadHoldsOneParameterWhoseGradientSumsBothUses) {
  for (const char* head : {"  - {name: head, op: linear, tie: tok, bias: false}\n",
                           "  - {name: head, op: linear, out: 10, tie: tok, bias: false}\n"}) {
    SCOPED_TRACE(head);
    Built b = build(std::string(kTok) + head + kLoss);
    ASSERT_TRUE(b.errors.empty()) << all_text(b.errors);
    const graph::Graph& g = b.g;
    ASSERT_EQ(g.params().size(), 1u);
    const graph::ParamInfo& p = g.params()[0];
    EXPECT_EQ(p.name, "tok.weight");
    EXPECT_EQ(p.layer, "tok");
    EXPECT_EQ(p.spec.desc.shape, (Shape{10, 6}));
    const graph::Node& h = node_named(g, "head");
    ASSERT_EQ(h.inputs.size(), 2u);
    EXPECT_EQ(h.inputs[1], p.value) << "the head's weight is the embedding's";
    EXPECT_EQ(h.attrs.i("out"), 10);
    EXPECT_EQ(g.value(h.outputs[0]).desc.shape, (Shape{2, 5, 10}));
    // The gradient: an add of the embedding's and the head's weight gradients.
    ASSERT_TRUE(p.grad.valid());
    const graph::Node& sum = g.node(g.value(p.grad).producer);
    ASSERT_EQ(sum.op->name, "add");
    std::set<std::string> parts;
    for (ValueId v : sum.inputs) parts.insert(g.node(g.value(v).producer).op->name);
    EXPECT_EQ(parts, (std::set<std::string>{"embedding_dw", "linear_dw"}));
    // The layer table counts the tied weight once, with the embedding.
    int64_t total = 0;
    for (const auto& row : graph::layer_table(g)) {
      total += row.params;
      if (row.name == "head") EXPECT_EQ(row.params, 0);
    }
    EXPECT_EQ(total, 60);
  }
}

// A tied linear of a block copy names a layer of the model; a linear can tie to another linear, and to a layer
// that is itself tied (the weight of the layer it names).
TEST(Tie, TiesToLinearsAndThroughTiedLayers) {
  Built b = build(std::string(kTok) +
                  "  - {name: up, op: linear, out: 6, bias: false}\n"
                  "  - {name: again, op: linear, tie: up, bias: false}\n"
                  "  - {name: head, op: linear, tie: tok, bias: false}\n"
                  "  - {name: head2, op: linear, tie: head, bias: false, from: again}\n"
                  "  - {name: both, op: add, from: [head, head2]}\n"
                  "  - {name: loss, op: cross_entropy, from: [both, targets]}\n");
  ASSERT_TRUE(b.errors.empty()) << all_text(b.errors);
  ASSERT_EQ(b.g.params().size(), 2u);
  EXPECT_EQ(node_named(b.g, "again").inputs[1], b.g.params()[1].value);
  EXPECT_EQ(b.g.params()[1].name, "up.weight");
  EXPECT_EQ(node_named(b.g, "head2").inputs[1], b.g.params()[0].value);
}

TEST(Tie, MistakesAreReportedAtTheTyingLayer) {
  const std::string tok = kTok, loss = kLoss;
  expect_error(tok + "  - {name: head, op: linear, tie: tokk, bias: false}\n" + loss, "m.yaml:6:35",
               "tie names no layer 'tokk'");
  expect_error(tok + "  - {name: head, op: linear, tie: tok}\n" + loss, "m.yaml:6:5", "needs bias: false");
  expect_error(tok + "  - {name: head, op: linear, out: 12, tie: tok, bias: false}\n" + loss, "m.yaml:6:5",
               "out = 12 but the tied weight [10, 6] of 'tok' has 10 rows");
  expect_error(tok + "  - {name: mid, op: linear, out: 4}\n  - {name: head, op: linear, tie: tok, bias: false}\n" + loss,
               "m.yaml:7:5", "has 4 features but the tied weight [10, 6] of 'tok' has 6 columns");
  expect_error(tok + "  - {name: head, op: linear, tie: tok, bias: false, init: {weight: zeros}}\n" + loss,
               "m.yaml:6:68", "a tied layer takes no init");
  expect_error(tok + "  - {name: act, op: relu}\n  - {name: head, op: linear, tie: act, bias: false}\n" + loss,
               "m.yaml:7:35", "layer 'act' (relu) has no parameter 'weight'");
  expect_error(tok + "  - {name: ln, op: layer_norm}\n  - {name: head, op: linear, tie: ln, bias: false}\n" + loss,
               "m.yaml:7:5", "has weight [6], not a matrix");
  expect_error(tok + "  - {name: head, op: linear, tie: later, bias: false}\n" +
                   "  - {name: later, op: linear, out: 10, bias: false}\n" + loss,
               "m.yaml:6:35", "which comes after it");
  expect_error(tok + "  - {name: head, op: linear, tie: head, bias: false}\n" + loss, "m.yaml:6:35",
               "tie names the layer itself");
  expect_error(tok + "  - {name: head, op: linear, bias: false}\n" + loss, "m.yaml:6:5",
               "needs attribute 'out'");
}
