// Tests of model files: the tiny-gpt example of MODEL_FORMAT.md expanded and resolved, vars and overrides,
// blocks (nesting, cycles, unused blocks checked), repeat on op and block layers and its cap, names,
// dangling from, inputs, outputs, metrics, and that one pass reports every error.
#include <gtest/gtest.h>

#include <chrono>

#include "io/model_spec.h"
#include "yaml_test_util.h"

using namespace braid;
using namespace braid::io;

namespace {

const char* kTinyGpt = R"(name: tiny-gpt
vars:                         # named numbers, overridable from the run file or the command line
  vocab: 256
  seq: 64
  d: 128
  heads: 4
  n_layer: 2
inputs:                       # per-sample shapes; the batch dimension is added in front at run time
  tokens:  {shape: [seq], dtype: i32}
  targets: {shape: [seq], dtype: i32}
blocks:                       # reusable sub-networks; `input` names the block's input value
  decoder:
    - {name: ln1,  op: layer_norm}
    - {name: attn, op: attention, heads: heads, causal: true}
    - {name: res1, op: add, from: [attn, input]}
    - {name: ln2,  op: layer_norm}
    - {name: fc,   op: linear, out: 4 * d}
    - {name: act,  op: gelu}
    - {name: proj, op: linear, out: d}
    - {name: res2, op: add, from: [proj, res1]}
layers:
  - {name: tok,    op: embedding, from: tokens, num: vocab, dim: d}
  - {name: pos,    op: position_embedding, max_len: seq}
  - {name: h,      block: decoder, repeat: n_layer}       # layers h.0.ln1 ... h.1.res2
  - {name: ln_f,   op: layer_norm}
  - {name: logits, op: linear, out: vocab, bias: false}
  - {name: loss,   op: cross_entropy, from: [logits, targets]}
outputs: [loss]               # the first output is the training loss (a scalar, mean over the batch)
metrics:                      # optional: named evaluation values, e.g. accuracy
  accuracy: {op: accuracy, from: [logits, targets]}
)";

const LayerSpec* find(const ModelSpec& m, const std::string& name) {
  for (const auto& l : m.layers)
    if (l.name == name) return &l;
  return nullptr;
}

std::vector<std::string> names(const ModelSpec& m) {
  std::vector<std::string> out;
  for (const auto& l : m.layers) out.push_back(l.name);
  return out;
}

using Strs = std::vector<std::string>;

ModelSpec parse_ok(const std::string& text, const std::vector<VarOverride>& ov = {}) {
  Diagnostics d;
  ModelSpec m = parse_model(text, "m.yaml", ov, d);
  EXPECT_TRUE(d.empty()) << iotest::dump(d);
  return m;
}

Diagnostics parse_bad(const std::string& text, const std::vector<VarOverride>& ov = {}, const ModelLimits& lim = {}) {
  Diagnostics d;
  parse_model(text, "m.yaml", ov, d, lim);
  EXPECT_FALSE(d.empty());
  return d;
}

// A small model around `layers` (a YAML list of layers) and optional `blocks`.
std::string model(const std::string& layers, const std::string& blocks = "", const std::string& outputs = "[out]") {
  std::string s = "vars: {d: 8, n: 2}\ninputs:\n  x: {shape: [d]}\n  y: {shape: [], dtype: i64}\n";
  if (!blocks.empty()) s += "blocks:\n" + blocks;
  return s + "layers:\n" + layers + "outputs: " + outputs + "\n";
}

TEST(Model, TinyGptExpandsAndResolves) {
  iotest::TempDir t;
  std::string path = t.write("tiny_gpt.yaml", kTinyGpt);
  Diagnostics d;
  ModelSpec m = load_model(path, {}, d);
  ASSERT_TRUE(d.empty()) << iotest::dump(d);
  EXPECT_EQ(m.name, "tiny-gpt");
  EXPECT_EQ(m.path, path);
  EXPECT_EQ(m.text, kTinyGpt);
  EXPECT_EQ(m.vars.at("d").i, 128);
  ASSERT_EQ(m.inputs.size(), 2u);
  EXPECT_EQ(m.inputs[0].name, "tokens");
  EXPECT_EQ(m.inputs[0].shape, (std::vector<int64_t>{64}));
  EXPECT_EQ(m.inputs[0].dtype, DType::i32);
  Strs block = {"ln1", "attn", "res1", "ln2", "fc", "act", "proj", "res2"};
  Strs expected = {"tok", "pos"};
  for (const char* copy : {"h.0.", "h.1."})
    for (const auto& b : block) expected.push_back(copy + b);
  for (const char* n : {"ln_f", "logits", "loss"}) expected.push_back(n);
  EXPECT_EQ(names(m), expected);

  EXPECT_EQ(find(m, "tok")->from, Strs{"tokens"});
  EXPECT_EQ(find(m, "pos")->from, Strs{"tok"});
  EXPECT_EQ(find(m, "h.0.ln1")->from, Strs{"pos"});
  EXPECT_EQ(find(m, "h.0.attn")->from, Strs{"h.0.ln1"});
  EXPECT_EQ(find(m, "h.0.res1")->from, (Strs{"h.0.attn", "pos"}));
  EXPECT_EQ(find(m, "h.0.res2")->from, (Strs{"h.0.proj", "h.0.res1"}));
  EXPECT_EQ(find(m, "h.1.ln1")->from, Strs{"h.0.res2"});
  EXPECT_EQ(find(m, "h.1.res1")->from, (Strs{"h.1.attn", "h.0.res2"}));
  EXPECT_EQ(find(m, "ln_f")->from, Strs{"h.1.res2"});
  EXPECT_EQ(find(m, "loss")->from, (Strs{"logits", "targets"}));
  EXPECT_EQ(find(m, "h.1.fc")->block_path, "h.1");
  EXPECT_EQ(find(m, "logits")->block_path, "");

  const LayerSpec* fc = find(m, "h.0.fc");
  EXPECT_EQ(fc->op, "linear");
  EXPECT_EQ(fc->loc.str(), path + ":17:7");
  EXPECT_EQ(fc->op_loc.str(), path + ":17:24");
  EXPECT_EQ(fc->from_locs[0].str(), path + ":17:7");  // implicit from: the layer's place
  ASSERT_EQ(fc->attrs.size(), 1u);
  EXPECT_EQ(fc->attrs[0].first, "out");
  EXPECT_EQ(fc->attr_key_locs[0].str(), path + ":17:32");
  EXPECT_EQ(fc->attrs[0].second.loc.str(), path + ":17:37");
  EXPECT_EQ(eval_int(fc->attrs[0].second, m.vars, "out", d), 512);
  const LayerSpec* attn = find(m, "h.1.attn");
  ASSERT_EQ(attn->attrs.size(), 2u);
  EXPECT_EQ(attn->attrs[1].first, "causal");
  EXPECT_EQ(find(m, "h.0.res1")->from_locs[1].str(), path + ":15:42");

  ASSERT_EQ(m.outputs.size(), 1u);
  EXPECT_EQ(m.outputs[0].name, "loss");
  EXPECT_EQ(m.outputs[0].loc.str(), path + ":28:11");
  ASSERT_EQ(m.metrics.size(), 1u);
  EXPECT_EQ(m.metrics[0].name, "accuracy");
  EXPECT_EQ(m.metrics[0].op, "accuracy");
  EXPECT_EQ(m.metrics[0].from, (Strs{"logits", "targets"}));
}

TEST(Model, VarOverridesReplaceInPlace) {
  YNode four;
  four.kind = YNode::Kind::Scalar;
  four.scalar = "heads";  // an override may use vars defined before the one it replaces
  four.loc = SourceLoc{"run.yaml", 2, 17};
  ModelSpec m = parse_ok(kTinyGpt, {VarOverride{"n_layer", four, SourceLoc{"run.yaml", 2, 8}}});
  EXPECT_EQ(m.vars.at("n_layer").i, 4);
  EXPECT_EQ(m.layers.size(), 5u + 4 * 8);
  EXPECT_NE(find(m, "h.3.res2"), nullptr);
  EXPECT_EQ(find(m, "ln_f")->from, Strs{"h.3.res2"});
}

TEST(Model, OverrideOfUnknownVarIsReportedAtTheOverride) {
  YNode v;
  v.kind = YNode::Kind::Scalar;
  v.scalar = "4";
  Diagnostics d = parse_bad(kTinyGpt, {VarOverride{"n_layers", v, SourceLoc{"run.yaml", 2, 8}}});
  ASSERT_EQ(d.size(), 1u) << iotest::dump(d);
  EXPECT_EQ(d.all()[0].loc.str(), "run.yaml:2:8");
  EXPECT_DIAG(d, 2, 8, "unknown var 'n_layers'");
  EXPECT_DIAG(d, 2, 8, "did you mean 'n_layer'?");
}

TEST(Model, VarsUseEarlierVars) {
  ModelSpec m = parse_ok(model("  - {name: out, op: linear, out: d}\n") +
                         "");
  EXPECT_EQ(m.vars.at("n").i, 2);
  ModelSpec m2 = parse_ok("vars:\n  a: 2\n  b: a * 3\n  c: \"max(a, b)\"\n  lr: 1e-3\n"
                          "inputs: {x: {shape: [c]}}\nlayers: [{op: relu}]\noutputs: [relu_0]\n");
  EXPECT_EQ(m2.vars.at("c").i, 6);
  EXPECT_FALSE(m2.vars.at("lr").is_int);
  EXPECT_EQ(m2.inputs[0].shape, std::vector<int64_t>{6});
  Diagnostics d = parse_bad("vars:\n  a: b\n  b: 2\ninputs: {x: {shape: [1]}}\nlayers: [{op: relu}]\noutputs: [relu_0]\n");
  EXPECT_DIAG(d, 2, 6, "var 'b' is used before its definition");
  EXPECT_DIAG(d, 2, 6, "it is defined at line 3, column 3");
}

TEST(Model, RepeatOnOpLayerChainsCopies) {
  ModelSpec m = parse_ok(model("  - {name: fc, op: linear, out: d, repeat: 3}\n  - {name: out, op: add, from: [fc, x]}\n"));
  EXPECT_EQ(names(m), (Strs{"fc.0", "fc.1", "fc.2", "out"}));
  EXPECT_EQ(find(m, "fc.0")->from, Strs{"x"});
  EXPECT_EQ(find(m, "fc.1")->from, Strs{"fc.0"});
  EXPECT_EQ(find(m, "fc.2")->from, Strs{"fc.1"});
  EXPECT_EQ(find(m, "out")->from, (Strs{"fc.2", "x"}));
  ModelSpec m2 = parse_ok(model("  - {name: out, op: add, from: [x, x], repeat: n}\n"));
  EXPECT_EQ(find(m2, "out.1")->from, (Strs{"out.0", "x"}));  // later copies replace only the first input
  EXPECT_EQ(m2.outputs[0].name, "out.1");
}

TEST(Model, UnnamedLayersAndBlocksUsedOnce) {
  ModelSpec m = parse_ok(model("  - {op: linear, out: d}\n  - {op: relu}\n  - {block: mlp}\n  - {name: out, op: relu}\n",
                               "  mlp:\n    - {op: linear, out: d}\n    - {name: act, op: relu}\n"));
  EXPECT_EQ(names(m), (Strs{"linear_0", "relu_1", "mlp_2.linear_0", "mlp_2.act", "out"}));
  EXPECT_EQ(find(m, "mlp_2.linear_0")->from, Strs{"relu_1"});
  EXPECT_EQ(find(m, "mlp_2.linear_0")->block_path, "mlp_2");
  EXPECT_EQ(find(m, "out")->from, Strs{"mlp_2.act"});
}

TEST(Model, NestedBlocksAndBlockFromModelInput) {
  ModelSpec m = parse_ok(model("  - {name: o, block: outer}\n  - {name: out, op: relu}\n",
                               "  inner:\n    - {name: a, op: add, from: [input, x]}\n"
                               "  outer:\n    - {name: i, block: inner, repeat: 2}\n    - {name: z, op: relu, from: input}\n"));
  EXPECT_EQ(names(m), (Strs{"o.i.0.a", "o.i.1.a", "o.z", "out"}));
  EXPECT_EQ(find(m, "o.i.0.a")->from, (Strs{"x", "x"}));
  EXPECT_EQ(find(m, "o.i.1.a")->from, (Strs{"o.i.0.a", "x"}));
  EXPECT_EQ(find(m, "o.z")->from, Strs{"x"});
  EXPECT_EQ(find(m, "o.i.1.a")->block_path, "o.i.1");
  EXPECT_EQ(find(m, "out")->from, Strs{"o.z"});
}

TEST(Model, TopLevelFromMayNameExpandedLayers) {
  ModelSpec m = parse_ok(model("  - {name: h, block: b, repeat: 2}\n  - {name: out, op: add, from: [h, h.0.r]}\n",
                               "  b:\n    - {name: r, op: relu}\n"));
  EXPECT_EQ(find(m, "out")->from, (Strs{"h.1.r", "h.0.r"}));
  Diagnostics d = parse_bad(model("  - {name: h, block: b}\n  - {name: out, op: add, from: [h, h.7.r]}\n",
                                  "  b:\n    - {name: r, op: relu}\n"));
  EXPECT_DIAG(d, 10, 36, "dangling from");
}

TEST(Model, BlockThatUsesItself) {
  Diagnostics d = parse_bad(model("  - {name: out, block: a}\n", "  a:\n    - {op: relu}\n    - {name: again, block: a}\n"));
  EXPECT_DIAG(d, 8, 28, "block 'a' uses itself");
}

TEST(Model, CycleThroughTwoBlocks) {
  Diagnostics d = parse_bad(model("  - {name: out, op: relu}\n",
                                  "  a:\n    - {name: p, block: b}\n  b:\n    - {name: q, block: a}\n"));
  EXPECT_DIAG(d, 9, 24, "block 'a' uses itself through a -> b -> a");
  EXPECT_EQ(d.size(), 1u) << iotest::dump(d);  // reported once, though unused
}

TEST(Model, UnusedBlocksAreChecked) {
  Diagnostics d = parse_bad(model("  - {name: out, op: relu}\n",
                                  "  spare:\n    - {op: relu, from: nope}\n    - {block: missing}\n"));
  EXPECT_DIAG(d, 7, 24, "dangling from");
  EXPECT_DIAG(d, 8, 15, "unknown block 'missing'");
}

TEST(Model, RepeatCapIsReportedWithoutExpanding) {
  auto t0 = std::chrono::steady_clock::now();
  Diagnostics d = parse_bad(model("  - {name: out, op: relu, repeat: 1000000000}\n"));
  EXPECT_DIAG(d, 6, 35, "more than the limit of 100000 layers");
  Diagnostics d2 = parse_bad(model("  - {name: out, block: b, repeat: 1000}\n",
                                   "  b:\n    - {name: l, op: relu, repeat: 1000}\n"));
  EXPECT_DIAG(d2, 9, 35, "expands to 1000000 layers");
  Diagnostics d3 = parse_bad(model("  - {name: out, block: b5}\n",
                                   "  b0: [{op: relu, repeat: 100}]\n  b1: [{block: b0, repeat: 100}]\n"
                                   "  b2: [{block: b1, repeat: 100}]\n  b3: [{block: b2, repeat: 100}]\n"
                                   "  b4: [{block: b3, repeat: 100}]\n  b5: [{block: b4, repeat: 100}]\n"));
  EXPECT_DIAG(d3, 8, 28, "repeat 100 of block 'b1' (10000 layers each)");
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(secs, 2.0);
  ModelLimits lim;
  lim.max_layers = 3;
  Diagnostics d4 = parse_bad(model("  - {op: relu}\n  - {op: relu}\n  - {op: relu}\n  - {name: out, op: relu}\n"), {}, lim);
  EXPECT_DIAG(d4, 5, 1, "the model expands to 4 layers");
  EXPECT_DIAG(parse_bad(model("  - {name: out, op: relu, repeat: 0}\n")), 6, 35, "at least 1");
  EXPECT_DIAG(parse_bad(model("  - {name: out, op: relu, repeat: 2.5}\n")), 6, 35, "must be an integer");
}

TEST(Model, BlockNestingDepthIsCapped) {
  std::string blocks = "  b0: [{op: relu}]\n";
  for (int i = 1; i < 40; ++i)
    blocks += "  b" + std::to_string(i) + ": [{block: b" + std::to_string(i - 1) + "}]\n";
  Diagnostics d = parse_bad(model("  - {name: out, op: relu}\n", blocks));
  EXPECT_DIAG(d, 38, 3, "nests blocks more than 32 deep");
}

TEST(Model, DanglingFrom) {
  Diagnostics d = parse_bad(model("  - {name: a, op: relu, from: b}\n  - {name: b, op: relu}\n  - {name: out, op: relu, from: xx}\n"));
  EXPECT_DIAG(d, 6, 31, "'b' is defined later");
  EXPECT_DIAG(d, 8, 33, "dangling from: no input or earlier layer is named 'xx'");
  EXPECT_DIAG(d, 8, 33, "did you mean 'x'?");
  Diagnostics d2 = parse_bad(model("  - {name: out, op: relu, from: input}\n"));
  EXPECT_DIAG(d2, 6, 33, "dangling from");  // `input` means something only inside blocks
}

TEST(Model, NamesAreUnique) {
  Diagnostics d = parse_bad(model("  - {name: out, op: relu}\n  - {name: out, op: relu}\n"));
  EXPECT_DIAG(d, 7, 12, "duplicate layer name 'out'");
  Diagnostics d2 = parse_bad(model("  - {name: x, op: relu}\n  - {name: out, op: relu}\n"));
  EXPECT_DIAG(d2, 6, 12, "also the name of an input");
  Diagnostics d3 = parse_bad(model("  - {name: a.b, op: relu}\n  - {name: out, op: relu}\n"));
  EXPECT_DIAG(d3, 6, 12, "holds a '.'");
  Diagnostics d4 = parse_bad(model("  - {name: out, block: b}\n", "  b:\n    - {name: input, op: relu}\n"));
  EXPECT_DIAG(d4, 7, 14, "may not be named 'input'");
}

TEST(Model, LayerShapeMistakes) {
  Diagnostics d = parse_bad(model("  - {name: out, op: relu, block: b}\n  - {name: z}\n  - {op: relu, from: []}\n  - relu\n"
                                  "  - {block: b, out: 3, init: {weight: zeros}}\n",
                                  "  b: [{op: relu}]\n"));
  EXPECT_DIAG(d, 8, 34, "has both 'op' and 'block'");
  EXPECT_DIAG(d, 9, 5, "layer 'z' has neither 'op' nor 'block'");
  EXPECT_DIAG(d, 10, 22, "'from' is an empty list");
  EXPECT_DIAG(d, 11, 5, "expected a layer mapping");
  EXPECT_DIAG(d, 12, 16, "unknown key 'out' in block layer");
  EXPECT_DIAG(d, 12, 30, "'init' belongs to op layers");
}

TEST(Model, InitEntries) {
  ModelSpec m = parse_ok(model("  - name: out\n    op: linear\n    out: d\n    init: {weight: \"normal(0, 0.02)\", bias: zeros}\n"));
  const LayerSpec* l = find(m, "out");
  ASSERT_EQ(l->init.size(), 2u);
  EXPECT_EQ(l->init[0].first, "weight");
  EXPECT_EQ(l->init[0].second.scalar, "normal(0, 0.02)");
  EXPECT_TRUE(l->attrs.size() == 1 && l->attrs[0].first == "out");
}

TEST(Model, Inputs) {
  Diagnostics d = parse_bad("inputs:\n  a: {shape: [0]}\n  b: {shape: [-3], dtype: f33}\n  c: {shape: 5}\n  e: {dtype: f32}\n"
                            "  f: {shape: [1], dtyp: f32}\nlayers: [{name: out, op: relu}]\noutputs: [out]\n");
  EXPECT_DIAG(d, 2, 15, "must be at least 1, got 0");
  EXPECT_DIAG(d, 3, 15, "must be at least 1, got -3");
  EXPECT_DIAG(d, 3, 27, "unknown dtype 'f33'");
  EXPECT_DIAG(d, 3, 27, "did you mean 'f32'?");
  EXPECT_DIAG(d, 4, 14, "expected a list of sizes");
  EXPECT_DIAG(d, 5, 6, "has no 'shape'");
  EXPECT_DIAG(d, 6, 19, "did you mean 'dtype'?");
  ModelSpec m = parse_ok(model("  - {name: out, op: relu}\n"));
  EXPECT_TRUE(m.inputs[1].shape.empty());
  EXPECT_EQ(m.inputs[1].dtype, DType::i64);
  EXPECT_EQ(m.inputs[0].dtype, DType::f32);
}

TEST(Model, Outputs) {
  EXPECT_DIAG(parse_bad(model("  - {name: out, op: relu}\n", "", "[]")), 7, 10, "'outputs' is empty");
  Diagnostics d = parse_bad(model("  - {name: out, op: relu}\n", "", "[ou, out, out]"));
  EXPECT_DIAG(d, 7, 11, "output 'ou' names no layer");
  EXPECT_DIAG(d, 7, 11, "did you mean 'out'?");
  EXPECT_DIAG(d, 7, 20, "duplicate output 'out'");
  EXPECT_DIAG(parse_bad(model("  - {name: out, op: relu}\n", "", "out")), 7, 10, "expected a list of layer names");
  ModelSpec m = parse_ok(model("  - {name: h, block: b, repeat: 2}\n  - {name: out, op: relu}\n",
                               "  b: [{name: r, op: relu}]\n", "[out, h, h.0.r, x]"));
  EXPECT_EQ(m.outputs[1].name, "h.1.r");
  EXPECT_EQ(m.outputs[2].name, "h.0.r");
  EXPECT_EQ(m.outputs[3].name, "x");
}

TEST(Model, Metrics) {
  Diagnostics d = parse_bad(model("  - {name: out, op: relu}\n") +
                            "metrics:\n  acc: {op: accuracy, from: [out, yy]}\n  m2: {from: out, repeat: 2}\n  m3: 5\n");
  EXPECT_DIAG(d, 9, 35, "dangling from");
  EXPECT_DIAG(d, 10, 7, "metric 'm2' has no 'op'");
  EXPECT_DIAG(d, 10, 19, "unknown key 'repeat' in metric 'm2'");
  EXPECT_DIAG(d, 11, 7, "expected {op: ..., from: [...]}");
}

TEST(Model, TopLevelShape) {
  EXPECT_DIAG(parse_bad("- a\n- b\n"), 1, 1, "a model file is a mapping");
  Diagnostics d = parse_bad("name: m\nlayer: []\n");
  EXPECT_DIAG(d, 2, 1, "did you mean 'layers'?");
  EXPECT_DIAG(d, 1, 1, "missing required key 'inputs'");
  EXPECT_DIAG(d, 1, 1, "missing required key 'outputs'");
  EXPECT_EQ(d.size(), 3u) << iotest::dump(d);  // not also "missing 'layers'": the misspelling says it
  Diagnostics d2 = parse_bad("inputs: {x: {shape: [1]}}\nlayres: [{name: out, op: relu}]\noutputs: [out]\n");
  EXPECT_EQ(d2.size(), 1u) << iotest::dump(d2);
  EXPECT_DIAG(parse_bad(""), 1, 1, "empty file");
}

TEST(Model, OnePassReportsEveryError) {
  Diagnostics d = parse_bad("nmae: x\nvars: {a: 1 // 0}\ninputs: {x: {shape: [2], dtype: f8}}\n"
                            "layers:\n  - {name: l, op: relu, from: q}\n  - {name: l, op: relu}\noutputs: [zz]\n");
  EXPECT_DIAG(d, 1, 1, "unknown key 'nmae'");
  EXPECT_DIAG(d, 2, 13, "division by zero");
  EXPECT_DIAG(d, 3, 33, "unknown dtype 'f8'");
  EXPECT_DIAG(d, 5, 31, "dangling from");
  EXPECT_DIAG(d, 6, 12, "duplicate layer name 'l'");
  EXPECT_DIAG(d, 7, 11, "output 'zz'");
  EXPECT_EQ(d.size(), 6u) << iotest::dump(d);
}

TEST(Model, LoadMissingFileNamesTheReference) {
  Diagnostics d;
  load_model("/nonexistent/m.yaml", {}, d, SourceLoc{"run.yaml", 1, 8});
  EXPECT_DIAG(d, 1, 8, "no such file");
  Diagnostics d2;
  load_model("/nonexistent/m.yaml", {}, d2);
  ASSERT_EQ(d2.size(), 1u);
  EXPECT_EQ(d2.all()[0].loc.file, "/nonexistent/m.yaml");
}

}  // namespace

namespace {

// Issue 24: a NUL or other control character (written as an escape in quotes) is refused in every name, and
// messages show it escaped instead of being cut at it.
TEST(Model, NamesWithControlCharactersAreRefused) {
  auto first = [](const Diagnostics& d) { return d.all().at(0).loc.str() + ": " + d.all().at(0).message; };
  EXPECT_EQ(first(parse_bad(model("  - {name: \"out\\0\", op: linear, out: d}\n"))),
            "m.yaml:6:12: layer name 'out\\x00' holds a control character");
  EXPECT_EQ(first(parse_bad(model("  - {name: out, block: b}\n", "  \"b\\x1b\": [{op: relu}]\n"))),
            "m.yaml:6:3: block name 'b\\x1b' holds a control character");
  EXPECT_EQ(first(parse_bad("vars: {\"d\\0\": 1}\ninputs: {x: {shape: [2]}}\nlayers: [{name: out, op: relu}]\n"
                            "outputs: [out]\n")),
            "m.yaml:1:8: var name 'd\\x00' is not an identifier");
  EXPECT_EQ(first(parse_bad(model("  - {name: out, op: linear, out: d}\n", "", "[out]\nmetrics:\n  \"m\\t\": {op: relu}"))),
            "m.yaml:9:3: metric name 'm\\x09' holds a control character");
}

}  // namespace

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

const char* kTail = "inputs: {x: {shape: [2]}}\nlayers: [{name: out, op: relu}]\noutputs: [out]\n";

// n vars, each over the next ("v0: v1", ...), ending in a number or back at v0 (a cycle).
std::string var_chain(int n, bool cycle) {
  std::string text = "vars:\n";
  for (int i = 0; i < n; ++i)
    text += "  v" + std::to_string(i) + ": " + (i + 1 < n ? "v" + std::to_string(i + 1) : cycle ? "v0" : "1") + "\n";
  return text + kTail;
}

// Issue 42: vars are evaluated in one pass in order, so 50,000 of them (100,000 in
// tests/cli/hostile_models_test.py), each defined from the next (forward references) or in one cycle, cost linear
// time (about 0.3 s here, most of it yaml-cpp; with a hint search per error, 100,000 did not finish in 15 s):
// the first forward reference is reported at its line, with the line of the definition, and the rest stop at
// the error cap without searching for hints. The time bound is loose so that a loaded machine passes; what it
// catches is the quadratic.
TEST(Model, LongVarChainIsLinear) {
  auto t0 = std::chrono::steady_clock::now();
  Diagnostics d = parse_bad(var_chain(50000, false));
  EXPECT_LT(seconds_since(t0), 5.0);
  EXPECT_EQ(d.size(), Diagnostics::kMaxErrors);
  EXPECT_DIAG(d, 2, 7, "var 'v1' is used before its definition");
  EXPECT_DIAG(d, 2, 7, "it is defined at line 3, column 3");
}

TEST(Model, LongVarCycleIsLinear) {
  auto t0 = std::chrono::steady_clock::now();
  Diagnostics d = parse_bad(var_chain(50000, true));
  EXPECT_LT(seconds_since(t0), 5.0);
  EXPECT_EQ(d.size(), Diagnostics::kMaxErrors);
  EXPECT_DIAG(d, 2, 7, "var 'v1' is used before its definition");
}

// The same chain written the other way is ordinary: each var over the one above it.
TEST(Model, LongVarChainInOrderEvaluates) {
  const int n = 50000;
  std::string text = "vars:\n  v0: 1\n";
  for (int i = 1; i < n; ++i) text += "  v" + std::to_string(i) + ": v" + std::to_string(i - 1) + " + 1\n";
  auto t0 = std::chrono::steady_clock::now();
  ModelSpec m = parse_ok(text + kTail);
  EXPECT_LT(seconds_since(t0), 5.0);
  EXPECT_EQ(m.vars.at("v49999").i, n);
}

TEST(Model, SelfAndTwoVarCyclesAreForwardReferences) {
  Diagnostics self = parse_bad(std::string("vars:\n  a: a + 1\n") + kTail);
  ASSERT_EQ(self.size(), 1u) << iotest::dump(self);
  EXPECT_DIAG(self, 2, 6, "var 'a' is used before its definition");
  Diagnostics two = parse_bad(std::string("vars: {a: b, b: a}\n") + kTail);
  ASSERT_EQ(two.size(), 1u) << iotest::dump(two);  // b: a is fine once a is (a stand-in) defined
  EXPECT_DIAG(two, 1, 11, "var 'b' is used before its definition");
  EXPECT_DIAG(two, 1, 11, "it is defined at line 1, column 14");
  // A name that is nowhere a var is still unknown, with its did-you-mean.
  Diagnostics unknown = parse_bad(std::string("vars: {width: 2, b: widht}\n") + kTail);
  EXPECT_DIAG(unknown, 1, 21, "unknown var 'widht'");
  EXPECT_DIAG(unknown, 1, 21, "did you mean 'width'?");
}

// 50,000 overrides of vars the model lacks beside 50,000 it has, over a model of 50,000 vars: linear, capped,
// hints short.
TEST(Model, ManyOverridesAreLinear) {
  const int n = 50000;
  std::string text = "vars:\n";
  for (int i = 0; i < n; ++i) text += "  v" + std::to_string(i) + ": " + std::to_string(i) + "\n";
  std::vector<VarOverride> ov;
  YNode v;
  v.kind = YNode::Kind::Scalar;
  v.scalar = "7";
  for (int i = 0; i < n; ++i) ov.push_back(VarOverride{"v" + std::to_string(i), v, SourceLoc{"run.yaml", i + 2, 3}});
  for (int i = 0; i < n; ++i)
    ov.push_back(VarOverride{"w" + std::to_string(i), v, SourceLoc{"run.yaml", n + i + 2, 3}});
  auto t0 = std::chrono::steady_clock::now();
  Diagnostics d = parse_bad(text + kTail, ov);
  EXPECT_LT(seconds_since(t0), 5.0);
  EXPECT_EQ(d.size(), Diagnostics::kMaxErrors);
  EXPECT_DIAG(d, n + 2, 3, "unknown var 'w0' in vars override");
  EXPECT_DIAG(d, n + 2, 3, "did you mean 'v0'?");
  for (const auto& e : d.all()) EXPECT_LT(e.hint.size(), 400u) << e.hint.substr(0, 200);
}

// Names of any length: a dangling `from` one character off a 100 KB layer name, 50 dangling 20 KB names, a
// 1 MB output name; each is reported at once, with no suggestion for names past the did-you-mean cap.
TEST(Model, LongNamesGetNoSuggestionAndCostLinearTime) {
  std::string big(100000, 'a'), near = big;
  near[50000] = 'b';
  auto t0 = std::chrono::steady_clock::now();
  Diagnostics one = parse_bad("inputs: {x: {shape: [2]}}\nlayers:\n  - {name: " + big + ", op: relu}\n"
                              "  - {name: out, op: relu, from: " + near + "}\noutputs: [out]\n");
  EXPECT_LT(seconds_since(t0), 3.0);
  ASSERT_EQ(one.size(), 1u) << iotest::dump(one).substr(0, 400);
  EXPECT_EQ(one.all()[0].loc.line, 4);
  EXPECT_NE(one.all()[0].message.find("dangling from"), std::string::npos);
  EXPECT_EQ(one.all()[0].hint, "");

  std::string layers;
  for (int i = 0; i < 50; ++i)
    layers += "  - {name: l" + std::to_string(i) + ", op: relu, from: " + std::string(20000, 'c') + std::to_string(i) +
              "}\n";
  t0 = std::chrono::steady_clock::now();
  Diagnostics many = parse_bad("inputs: {x: {shape: [2]}}\nlayers:\n" + layers + "outputs: [l49]\n");
  EXPECT_LT(seconds_since(t0), 3.0);
  EXPECT_EQ(many.size(), 50u);
  EXPECT_EQ(many.all()[49].loc.line, 52);

  t0 = std::chrono::steady_clock::now();
  Diagnostics out = parse_bad("inputs: {x: {shape: [2]}}\nlayers: [{name: out, op: relu}]\noutputs: [" +
                              std::string(1 << 20, 'o') + "]\n");
  EXPECT_LT(seconds_since(t0), 3.0);
  EXPECT_DIAG(out, 3, 11, "names no layer or input");
}

// Issue 42: C1 control characters (U+0080-U+009F, UTF-8 C2 80-C2 9F; U+0085 is NEL, a line break to some
// readers) are refused in names like C0 and DEL, written escaped in the message; U+00A0 and later are letters.
TEST(Model, NamesWithC1ControlCharactersAreRefused) {
  auto first = [](const Diagnostics& d) { return d.all().at(0).loc.str() + ": " + d.all().at(0).message; };
  // Written raw, C1 controls are refused as text (YAML does not allow them; NEL is a line break to it).
  EXPECT_EQ(first(parse_bad(model("  - {name: \"out\xc2\x85\", op: linear, out: d}\n"))),
            "m.yaml:6:16: line break character U+0085 in the text");
  EXPECT_EQ(first(parse_bad("inputs: {\"x\xc2\x80\": {shape: [2]}}\nlayers: [{name: out, op: relu}]\n"
                            "outputs: [out]\n")),
            "m.yaml:1:12: not a text file: control character U+0080");
  // Escaped, they reach the name check: \N is NEL, \x85 the same; \_ is NBSP, a letter.
  EXPECT_EQ(first(parse_bad(model("  - {name: \"o\\Nt\", op: linear, out: d}\n"))),
            "m.yaml:6:12: layer name 'o\\xc2\\x85t' holds a control character");
  EXPECT_EQ(first(parse_bad(model("  - {name: \"o\\x80t\", op: linear, out: d}\n"))),
            "m.yaml:6:12: layer name 'o\\xc2\\x80t' holds a control character");
  EXPECT_EQ(first(parse_bad(model("  - {name: \"o\\_t\", op: linear, out: d}\n"))),
            "m.yaml:7:11: output 'out' names no layer or input");
  EXPECT_EQ(first(parse_bad(model("  - {name: out, block: b}\n", "  \"b\\x9f\": [{op: relu}]\n"))),
            "m.yaml:6:3: block name 'b\\xc2\\x9f' holds a control character");
  EXPECT_EQ(first(parse_bad(
                model("  - {name: out, op: linear, out: d}\n", "", "[out]\nmetrics:\n  \"m\\x90\": {op: relu}"))),
            "m.yaml:9:3: metric name 'm\\xc2\\x90' holds a control character");
  ModelSpec ok =
      parse_ok(model("  - {name: \"out\xc2\xa0\xc3\xa9\", op: linear, out: d}\n", "", "[\"out\xc2\xa0\xc3\xa9\"]"));
  EXPECT_EQ(ok.layers.at(0).name, "out\xc2\xa0\xc3\xa9");
}

}  // namespace
