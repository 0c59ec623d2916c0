// Autodiff and verification on hand-built graphs of elementwise ops: gradients of shared values are
// summed, parameters get gradients of their own shape, values that do not need gradients get none.
#include <gtest/gtest.h>

#include "graph/autodiff.h"
#include "graph/ir.h"
#include "graph/verify.h"
#include "ops/registry.h"

using namespace braid;
using namespace braid::graph;

namespace {
const ops::OpDef& op(const char* name) { return ops::Registry::get().at(name); }
ops::ParamSpec param(const char* name, Shape s) { return ops::ParamSpec{name, TensorDesc{s}, ops::InitSpec::ones(), false}; }
}  // namespace

TEST(Autodiff, ParameterGradientShapesAndVerify) {
  Graph g(2);
  ValueId x = g.add_input("x", TensorDesc{Shape{2, 3}});
  ValueId w = g.add_param("lay", param("w", Shape{3}));
  ValueId b = g.add_param("lay", param("b", Shape{2, 3}));
  ValueId h = g.add_node(op("mul"), {}, {x, w}, 1, "lay", "lay", {}, false)[0];
  ValueId r = g.add_node(op("relu"), {}, {h}, 1, "act", "act", {}, false)[0];
  ValueId o = g.add_node(op("add"), {}, {r, b, r}, 3, "sum", "sum", {}, false)[0];
  g.outputs.emplace_back("loss", o);
  // The loss must be a scalar for training; autodiff itself only needs a seed shaped like the loss.
  append_backward(g);
  verify(g);
  ASSERT_TRUE(g.params()[0].grad.valid());
  ASSERT_TRUE(g.params()[1].grad.valid());
  EXPECT_EQ(g.value(g.params()[0].grad).desc.shape, (Shape{3}));
  EXPECT_EQ(g.value(g.params()[1].grad).desc.shape, (Shape{2, 3}));
  int backward = 0;
  for (const auto& n : g.nodes()) backward += n.backward;
  EXPECT_GT(backward, 0);
}

TEST(Autodiff, InputsDoNotGetGradients) {
  Graph g(1);
  ValueId x = g.add_input("x", TensorDesc{Shape{1, 4}});
  ValueId y = g.add_node(op("relu"), {}, {x}, 1, "act", "act", {}, false)[0];
  g.outputs.emplace_back("loss", y);
  size_t before = g.nodes().size();
  append_backward(g);  // nothing is trainable: no backward nodes at all
  EXPECT_EQ(g.nodes().size(), before);
}

// dropout with p = 0 passes its gradient through (no backward node); with p > 0 dropout_grad draws the mask again
// from the forward's random stream (rng_node).
TEST(Autodiff, DropoutOffPassesTheGradientThrough) {
  for (double p : {0.0, 0.25}) {
    Graph g(2);
    ValueId x = g.add_input("x", TensorDesc{Shape{2, 3}});
    ValueId w = g.add_param("lay", param("w", Shape{3}));
    ValueId h = g.add_node(op("mul"), {}, {x, w}, 1, "lay", "lay", {}, false)[0];
    ops::Attrs a{{"p", p}};
    ops::complete_attrs(op("dropout"), a);
    ValueId d = g.add_node(op("dropout"), a, {h}, 1, "drop", "drop", {}, false)[0];
    ValueId o = g.add_node(op("add"), {}, {d, d}, 2, "sum", "sum", {}, false)[0];
    g.outputs.emplace_back("loss", o);
    append_backward(g);
    verify(g);
    int grads = 0;
    for (const auto& n : g.nodes())
      if (n.backward && n.op->name == "dropout_grad") {
        ++grads;
        EXPECT_EQ(graph::rng_name(n), "drop");
      }
    EXPECT_EQ(grads, p == 0 ? 0 : 1) << "p " << p;
    ASSERT_TRUE(g.params()[0].grad.valid());
  }
}

// relu's gradient reads relu's output (the same mask as its input: <= 0 exactly where the input is), so that relu
// runs in place; gelu's reads its input, tanh's and sigmoid's their output.
TEST(Autodiff, ActivationGradientsReadWhatTheirDerivativeNeeds) {
  for (const char* act : {"relu", "gelu", "tanh", "sigmoid"}) {
    Graph g(2);
    ValueId x = g.add_input("x", TensorDesc{Shape{2, 3}});
    ValueId w = g.add_param("lay", param("w", Shape{3}));
    ValueId h = g.add_node(op("mul"), {}, {x, w}, 1, "lay", "lay", {}, false)[0];
    ops::Attrs a;
    ops::complete_attrs(op(act), a);
    ValueId y = g.add_node(op(act), a, {h}, 1, "act", "act", {}, false)[0];
    ValueId o = g.add_node(op("add"), {}, {y, y}, 2, "sum", "sum", {}, false)[0];
    g.outputs.emplace_back("loss", o);
    append_backward(g);
    verify(g);
    const std::string grad_op = std::string(act) + "_grad";
    int found = 0;
    for (const auto& n : g.nodes())
      if (n.op->name == grad_op) {
        ++found;
        ASSERT_EQ(n.inputs.size(), 2u);
        EXPECT_EQ(n.inputs[1], std::string(act) == "gelu" ? h : y) << act;
      }
    EXPECT_EQ(found, 1) << act;
  }
}
