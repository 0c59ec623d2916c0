// Size overflow (issue 24): element counts, bytes, parameter counts and workspaces that do not fit in int64, or
// that take the graph past 2^62 bytes, are UserErrors at the layer or input, never a wrapped (negative) size.
#include <gtest/gtest.h>

#include "graph/build.h"
#include "graph/print.h"
#include "io/model_spec.h"

using namespace braid;

namespace {

io::ModelSpec model(const std::string& text) {
  Diagnostics d;
  io::ModelSpec m = io::parse_model(text, "m.yaml", {}, d);
  EXPECT_TRUE(d.empty()) << (d.empty() ? "" : d.all()[0].loc.str() + ": " + d.all()[0].message);
  return m;
}

// The first diagnostic of build_graph, as "file:line:col: message".
std::string build_error(const std::string& text, int64_t batch = 2) {
  io::ModelSpec m = model(text);
  try {
    graph::build_graph(m, batch);
  } catch (const UserError& e) {
    const auto& d = e.diagnostics().at(0);
    return d.loc.str() + ": " + d.message;
  }
  return "";
}

TEST(GraphSizes, InputElementCountPastInt64) {
  std::string err = build_error(
      "inputs:\n  x: {shape: [3037000500, 3037000500]}\nlayers:\n  - {name: fc, op: linear, out: 2}\noutputs: [fc]\n");
  EXPECT_NE(err.find("m.yaml:2:3: input 'x' (batch 2) f32[2, 3037000500, 3037000500] has more elements"),
            std::string::npos) << err;
}

TEST(GraphSizes, ParameterPastInt64) {
  std::string err = build_error(
      "inputs:\n  x: {shape: [4294967296]}\nlayers:\n  - {name: fc, op: linear, out: 4294967296}\noutputs: [fc]\n");
  EXPECT_NE(err.find("m.yaml:4:5: layer 'fc' (linear): parameter 'weight'"), std::string::npos) << err;
}

TEST(GraphSizes, OutputPastTheGraphBudget) {
  // 2^30 samples of 2^30 floats: 2^62 bytes for the input alone, so the first layer's output passes 2^62.
  std::string err = build_error(
      "inputs:\n  x: {shape: [1073741824]}\nlayers:\n  - {name: r, op: relu}\noutputs: [r]\n", int64_t{1} << 30);
  EXPECT_NE(err.find("m.yaml:4:5: layer 'r' (relu): output 0 f32[1073741824, 1073741824] takes the graph past 2^62"),
            std::string::npos) << err;
}

TEST(GraphSizes, ReshapeProductPastInt64) {
  std::string err = build_error(
      "inputs:\n  x: {shape: [4]}\nlayers:\n"
      "  - {name: r, op: reshape, shape: [4294967296, 4294967296, 4]}\noutputs: [r]\n");
  EXPECT_NE(err.find("m.yaml:4:5: layer 'r' (reshape)"), std::string::npos) << err;
  EXPECT_NE(err.find("more elements than a 64-bit integer holds"), std::string::npos) << err;
}

TEST(GraphSizes, PaddingPastInt64) {
  std::string err = build_error(
      "inputs:\n  x: {shape: [1, 4, 4]}\nlayers:\n"
      "  - {name: c, op: conv2d, out: 1, kernel: 3, padding: 4611686018427387904}\noutputs: [c]\n");
  EXPECT_NE(err.find("m.yaml:4:5: layer 'c' (conv2d)"), std::string::npos) << err;
  EXPECT_NE(err.find("overflows 64 bits"), std::string::npos) << err;
}

TEST(GraphSizes, ConvWorkspacePastInt64) {
  // Tensors that fit, but the im2col columns of one sample (C k^2 x Ho Wo) do not.
  std::string err = build_error(
      "inputs:\n  x: {shape: [1, 1048576, 1048576]}\nlayers:\n"
      "  - {name: c, op: conv2d, out: 1, kernel: 4096, padding: 2048, bias: false}\noutputs: [c]\n", 1);
  EXPECT_NE(err.find("m.yaml:4:5: layer 'c' (conv2d)"), std::string::npos) << err;
}

TEST(GraphSizes, LargeButValidGraphKeepsPositiveCounts) {
  io::ModelSpec m = model("inputs:\n  x: {shape: [1048576]}\n  y: {shape: [1048576]}\nlayers:\n"
                          "  - {name: fc, op: linear, out: 1048576}\n  - {name: loss, op: mse_loss, from: [fc, y]}\n"
                          "outputs: [loss]\n");
  graph::Graph g = graph::build_graph(m, 1024, {.with_backward = false});
  auto rows = graph::layer_table(g);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].params, int64_t{1048576} * 1048576 + 1048576);
  EXPECT_GT(rows[0].flops, 0);
}

}  // namespace
