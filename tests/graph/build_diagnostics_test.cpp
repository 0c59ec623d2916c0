// build_graph's collecting form (graph/build.h): every mistake of a model in one pass, a block's mistake once
// naming its copies, unused blocks checked for what needs no input, and no cascade past a broken layer.
#include <gtest/gtest.h>

#include "graph/build.h"
#include "io/model_spec.h"

using namespace braid;

namespace {

std::vector<Diagnostic> build_errors(const std::string& text) {
  Diagnostics diags;
  io::ModelSpec m = io::parse_model(text, "m.yaml", {}, diags);
  graph::BuildOptions bo;
  bo.with_backward = true;
  graph::build_graph(m, 2, bo, diags);
  return diags.all();
}

std::string all_text(const std::vector<Diagnostic>& d) {
  std::string s;
  for (const auto& x : d) s += x.format() + "\n";
  return s;
}

const char* kHead = R"(inputs:
  x: {shape: [16]}
  y: {shape: [4]}
)";

}  // namespace

TEST(BuildDiagnostics, BlockErrorOnceNamingItsCopies) {
  auto d = build_errors(std::string(kHead) + R"(blocks:
  b:
    - {name: fc, op: linear, out: 16}
    - {name: act, op: rleu}
layers:
  - {name: h, block: b, repeat: 6}
  - {name: out, op: linear, out: 4}
  - {name: loss, op: mse_loss, from: [out, y]}
outputs: [loss]
)");
  ASSERT_EQ(d.size(), 1u) << all_text(d);
  EXPECT_EQ(d[0].loc.str(), "m.yaml:7:23");
  EXPECT_NE(d[0].message.find("unknown op 'rleu' in layer 'h.0.act' (in copies h.0..h.5)"), std::string::npos) << d[0].message;
}

TEST(BuildDiagnostics, UnusedBlockIsChecked) {
  auto d = build_errors(std::string(kHead) + R"(blocks:
  spare:
    - {name: fc, op: linear, outt: 16}
    - {name: act, op: rleu}
layers:
  - {name: out, op: linear, out: 4}
  - {name: loss, op: mse_loss, from: [out, y]}
outputs: [loss]
)");
  ASSERT_EQ(d.size(), 2u) << all_text(d);
  EXPECT_NE(d[0].message.find("unknown attribute 'outt'"), std::string::npos) << all_text(d);
  EXPECT_NE(d[1].message.find("unknown op 'rleu' in layer 'spare.act'"), std::string::npos) << all_text(d);
}

TEST(BuildDiagnostics, BrokenLayerIsUnknownDownstream) {
  // fc1's attribute is wrong, so fc2 (fed by it) is not shape-checked; the mismatch at `bad` (fed by x
  // only) and the unknown op after fc2 are still found: three errors, none cascaded.
  auto d = build_errors(std::string(kHead) + R"(layers:
  - {name: fc1, op: linear, out: 8, bias: maybe}
  - {name: fc2, op: linear, out: 4}
  - {name: act, op: sigmoyd}
  - {name: bad, op: add, from: [x, y]}
  - {name: loss, op: mse_loss, from: [fc2, y]}
outputs: [loss]
)");
  ASSERT_EQ(d.size(), 3u) << all_text(d);
  EXPECT_NE(d[0].message.find("'bias'"), std::string::npos) << all_text(d);
  EXPECT_NE(d[1].message.find("unknown op 'sigmoyd'"), std::string::npos) << all_text(d);
  EXPECT_NE(d[2].message.find("layer 'bad' (add)"), std::string::npos) << all_text(d);
}

TEST(BuildDiagnostics, ModelWithIoErrorsStillGetsGraphChecks) {
  // The duplicate name is io's; the unknown op is the graph's: both in one pass.
  Diagnostics diags;
  io::ModelSpec m = io::parse_model(std::string(kHead) + R"(layers:
  - {name: fc, op: linear, out: 4}
  - {name: fc, op: linaer, out: 4}
  - {name: loss, op: mse_loss, from: [fc, y]}
outputs: [loss]
)", "m.yaml", {}, diags);
  ASSERT_EQ(diags.size(), 1u);
  graph::build_graph(m, 2, {}, diags);
  ASSERT_EQ(diags.size(), 2u) << all_text(diags.all());
  EXPECT_NE(diags.all()[1].message.find("unknown op 'linaer'"), std::string::npos) << all_text(diags.all());
}
