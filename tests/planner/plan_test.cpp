// The Plan and its file form: the single-device plan validates for every shipped model, to_yaml is a fixed
// point of parse_plan (byte for byte), the shipped example plans are valid and written in canonical form
// (the ones in docs/plan_file.md included), pins record exactly what a file wrote and where, and every
// reading mistake of a file is reported in one pass.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "planner/plan.h"
#include "plan_test_util.h"

using namespace braid;
using namespace braid::planner;
using namespace braid::planner::test;
namespace fs = std::filesystem;

namespace {

DeviceSpec cpu(int n) {
  DeviceSpec d;
  std::string err;
  EXPECT_TRUE(parse_devices("cpu:" + std::to_string(n), &d, &err)) << err;
  return d;
}

std::vector<std::string> shipped_models() {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(source_dir() + "/models"))
    if (e.path().extension() == ".yaml") out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(SingleDevicePlan, ValidatesAndRoundTripsForEveryShippedModel) {
  auto models = shipped_models();
  ASSERT_GE(models.size(), 4u);
  for (const auto& name : models) {
    SCOPED_TRACE(name);
    graph::Graph g = model_graph(name, 8);
    Plan p = single_device_plan(g, 8, 4);
    EXPECT_EQ(p.summary.micro_batch, 4);
    EXPECT_EQ(p.summary.micro_batches, 2);
    ASSERT_EQ(p.stages.size(), 1u);
    EXPECT_EQ(p.stages[0].devices, std::vector<int>{0});
    EXPECT_EQ(p.layers.size(), forward_layers(g).size());
    for (const auto& l : p.layers) EXPECT_EQ(l.signature, "replicated") << l.layer;
    Diagnostics d;
    validate_plan(p, g, 8, cpu(1), d);
    EXPECT_TRUE(d.empty()) << dump(d);
    // Through its file form: same bytes, still valid.
    std::string text = to_yaml(p);
    Diagnostics d2;
    Plan back = parse_plan(text, "single.yaml", d2);
    EXPECT_TRUE(d2.empty()) << dump(d2) << text;
    EXPECT_EQ(to_yaml(back), text);
    validate_plan(back, g, 8, cpu(1), d2);
    EXPECT_TRUE(d2.empty()) << dump(d2);
  }
}

TEST(SingleDevicePlan, WithoutAGraphKeepsTheSummary) {
  Plan p = single_device_plan(32, 8);
  EXPECT_EQ(p.summary.micro_batch, 8);
  EXPECT_EQ(p.summary.micro_batches, 4);
  EXPECT_EQ(p.summary.devices, 1);
  EXPECT_TRUE(p.stages.empty());
  Plan whole = single_device_plan(32, 0);
  EXPECT_EQ(whole.summary.micro_batch, 32);
  EXPECT_EQ(whole.summary.micro_batches, 1);
}

// A plan exercising every field: interleaved PP2 x 2 chunks with a tensor group, predicted values that are
// awkward to print, and pinned zeros (written although zero).
Plan rich_plan() {
  Plan p;
  Summary& s = p.summary;
  s.devices = 4;
  s.data_parallel = 1;
  s.tensor_parallel = 2;
  s.pipeline_stages = 2;
  s.virtual_stages = 2;
  s.micro_batch = 2;
  s.micro_batches = 4;
  s.schedule = "interleaved";
  s.predicted = {0.1, 97, 1e-7, "compute"};
  auto stage = [](std::vector<int> dev, std::string a, std::string b, int v) {
    StagePlan st;
    st.devices = std::move(dev);
    st.mesh = {1, 2};
    st.first_layer = std::move(a);
    st.last_layer = std::move(b);
    st.virtual_index = v;
    return st;
  };
  p.stages = {stage({0, 1}, "tok", "h.0.res1", 0), stage({2, 3}, "h.0.ln2", "h.0.res2", 0),
              stage({0, 1}, "h.1.ln1", "h.1.res2", 1), stage({2, 3}, "ln_f", "loss", 1)};
  LayerPlan fc;
  fc.layer = "h.0.fc";
  fc.signature = "column";
  fc.tensor_parallel = 2;
  fc.predicted_time_s = 123456.789;
  fc.predicted_memory_gb = 1.0 / 3.0;
  LayerPlan proj;
  proj.layer = "h.0.proj";
  proj.signature = "row";
  proj.tensor_parallel = 2;
  proj.pinned.set("predicted.time_s", {});  // written as 0
  LayerPlan ln;
  ln.layer = "h.1.ln1";
  ln.signature = "data";
  ln.tensor_parallel = 2;
  p.layers = {fc, proj, ln};
  return p;
}

TEST(PlanYaml, ToYamlIsAFixedPointOfParse) {
  Plan p = rich_plan();
  std::string text = to_yaml(p);
  EXPECT_EQ(to_yaml(p), text) << "to_yaml is deterministic";
  Diagnostics d;
  Plan back = parse_plan(text, "rich.yaml", d);
  ASSERT_TRUE(d.empty()) << dump(d) << text;
  EXPECT_EQ(to_yaml(back), text);
  // Every value came back exactly, doubles included.
  EXPECT_EQ(back.summary.schedule, "interleaved");
  EXPECT_EQ(back.summary.virtual_stages, 2);
  EXPECT_EQ(back.summary.predicted.step_time_s, 0.1);
  EXPECT_EQ(back.summary.predicted.peak_memory_gb, 1e-7);
  EXPECT_EQ(back.summary.predicted.bound_by, "compute");
  ASSERT_EQ(back.stages.size(), 4u);
  EXPECT_EQ(back.stages[2].devices, (std::vector<int>{0, 1}));
  EXPECT_EQ(back.stages[2].mesh, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(back.stages[2].virtual_index, 1);
  EXPECT_EQ(back.stages[3].last_layer, "loss");
  ASSERT_EQ(back.layers.size(), 3u);
  EXPECT_EQ(back.layers[0].predicted_time_s, 123456.789);
  EXPECT_EQ(back.layers[0].predicted_memory_gb, 1.0 / 3.0);
  EXPECT_TRUE(back.layers[1].pinned.has("predicted.time_s"));
  EXPECT_FALSE(back.layers[1].pinned.has("predicted.memory_gb"));
  // And it is a valid plan for tiny_gpt on cpu:4 with a batch of 8.
  graph::Graph g = model_graph("tiny_gpt.yaml", 8);
  Diagnostics v;
  validate_plan(back, g, 8, cpu(4), v);
  EXPECT_TRUE(v.empty()) << dump(v);
}

TEST(PlanYaml, NumbersReadBackExactly) {
  const double values[] = {1e20, 1e-300, 5e-324, 0.1 + 0.2, 1.7976931348623157e308, -2.5, 3.0, 123456789.125};
  for (double v : values) {
    Plan p = single_device_plan(8, 8);
    p.summary.predicted.step_time_s = v;
    std::string text = to_yaml(p);
    Diagnostics d;
    Plan back = parse_plan(text, "n.yaml", d);
    ASSERT_TRUE(d.empty()) << dump(d) << text;
    EXPECT_EQ(back.summary.predicted.step_time_s, v) << text;
    EXPECT_EQ(to_yaml(back), text);
  }
}

TEST(PlanYaml, SummaryComesFirstThenStagesThenLayers) {
  std::string text = to_yaml(rich_plan());
  auto s = text.find("\nsummary:\n"), st = text.find("\nstages:\n"), l = text.find("\nlayers:\n");
  ASSERT_NE(s, std::string::npos) << text;
  EXPECT_LT(s, st);
  EXPECT_LT(st, l);
  EXPECT_NE(text.find("  predicted: {step_time_s: 0.1, tflops_per_device: 97, peak_memory_gb: 1e-07, "
                      "bound_by: compute}\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  - {devices: [0, 1], mesh: [1, 2], first_layer: h.1.ln1, last_layer: h.1.res2, virtual: 1}\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  - {layer: h.0.proj, signature: row, tensor_parallel: 2, predicted: {time_s: 0}}\n"),
            std::string::npos)
      << text;
}

TEST(PlanYaml, StringsThatAreNotPlainAreQuoted) {
  Plan p = single_device_plan(8, 8);
  p.summary.schedule = "yes";  // would read back as a boolean word
  StagePlan st;
  st.devices = {0};
  st.mesh = {1, 1};
  st.first_layer = "a b";
  st.last_layer = "12";
  p.stages.push_back(st);
  LayerPlan l;
  l.layer = "x\"y";
  l.signature = "-s";
  p.layers.push_back(l);
  std::string text = to_yaml(p);
  Diagnostics d;
  Plan back = parse_plan(text, "q.yaml", d);
  ASSERT_TRUE(d.empty()) << dump(d) << text;
  EXPECT_EQ(back.summary.schedule, "yes");
  EXPECT_EQ(back.stages[0].first_layer, "a b");
  EXPECT_EQ(back.stages[0].last_layer, "12");
  EXPECT_EQ(back.layers[0].layer, "x\"y");
  EXPECT_EQ(back.layers[0].signature, "-s");
  EXPECT_EQ(to_yaml(back), text);
}

std::vector<std::string> example_plans() {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(source_dir() + "/tests/plans"))
    if (e.path().extension() == ".yaml") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

// tests/plans/*.yaml: valid plans for tiny_gpt with configs/tiny_gpt.yaml's batch of 32 on cpu:4, each
// written exactly as to_yaml writes it.
TEST(PlanYaml, ExamplePlansAreValidAndCanonical) {
  auto files = example_plans();
  ASSERT_GE(files.size(), 3u);
  graph::Graph g = model_graph("tiny_gpt.yaml", 32);
  for (const auto& f : files) {
    SCOPED_TRACE(f);
    Diagnostics d;
    Plan p = read_plan(f, d);
    ASSERT_TRUE(d.empty()) << dump(d);
    validate_plan(p, g, 32, cpu(4), d);
    EXPECT_TRUE(d.empty()) << dump(d);
    EXPECT_EQ(to_yaml(p), slurp(f));
  }
}

// Every ```yaml block of docs/plan_file.md that is a whole plan file (it opens with to_yaml's first line) is
// one of tests/plans/*.yaml, so the documented examples are the ones checked above.
TEST(PlanYaml, DocumentedExamplesAreTheCheckedOnes) {
  std::string doc = slurp(source_dir() + "/docs/plan_file.md");
  std::vector<std::string> files;
  for (const auto& f : example_plans()) files.push_back(slurp(f));
  int blocks = 0;
  for (size_t a = doc.find("```yaml\n"); a != std::string::npos; a = doc.find("```yaml\n", a)) {
    a += 8;
    size_t b = doc.find("```", a);
    ASSERT_NE(b, std::string::npos);
    std::string block = doc.substr(a, b - a);
    a = b + 3;
    if (block.rfind("# braid plan file", 0) != 0) continue;
    ++blocks;
    EXPECT_NE(std::find(files.begin(), files.end(), block), files.end()) << "not in tests/plans:\n" << block;
  }
  EXPECT_GE(blocks, 1) << "docs/plan_file.md shows no whole plan file";
}

TEST(PlanYaml, PinsRecordWhatWasWrittenAndWhere) {
  const std::string text =
      "summary:\n"
      "  devices: 2\n"
      "  data_parallel: 2\n"
      "  tensor_parallel: 1\n"
      "  pipeline_stages: 1\n"
      "  micro_batch: 4\n"
      "  micro_batches: 1\n"
      "  schedule: gpipe\n"
      "stages:\n"
      "  - {devices: [0, 1], mesh: [2, 1], first_layer: tok, last_layer: loss}\n"
      "layers:\n"
      "  - {layer: h.0.fc, signature: replicated}\n";
  Diagnostics d;
  Plan p = parse_plan(text, "pins.yaml", d);
  ASSERT_TRUE(d.empty()) << dump(d);
  EXPECT_TRUE(p.summary.pinned.has("micro_batches"));
  EXPECT_EQ(p.summary.pinned.loc("micro_batches", {}).str(), "pins.yaml:7:18");
  EXPECT_FALSE(p.summary.pinned.has("virtual_stages"));  // optional, left to the planner
  EXPECT_FALSE(p.summary.pinned.has("predicted.step_time_s"));
  EXPECT_EQ(p.summary.virtual_stages, 1);
  EXPECT_EQ(p.stages[0].pinned.loc("mesh", {}).str(), "pins.yaml:10:29");
  EXPECT_EQ(p.stages[0].device_locs.at(1).str(), "pins.yaml:10:19");
  EXPECT_FALSE(p.stages[0].pinned.has("virtual"));
  ASSERT_EQ(p.layers.size(), 1u);
  EXPECT_TRUE(p.layers[0].pinned.has("signature"));
  EXPECT_FALSE(p.layers[0].pinned.has("tensor_parallel"));
  EXPECT_EQ(p.layers[0].tensor_parallel, 1);
  EXPECT_TRUE(p.pinned.has("layers"));
  // Valid as written: layers without an entry are replicated; add_default_layers lists them all.
  graph::Graph g = model_graph("tiny_gpt.yaml", 8);
  validate_plan(p, g, 8, cpu(2), d);
  EXPECT_TRUE(d.empty()) << dump(d);
  add_default_layers(p, g);
  ASSERT_EQ(p.layers.size(), forward_layers(g).size());
  EXPECT_EQ(p.layers[0].layer, "tok");
  EXPECT_FALSE(p.layers[0].pinned.has("signature"));
  auto fc = std::find_if(p.layers.begin(), p.layers.end(), [](const LayerPlan& l) { return l.layer == "h.0.fc"; });
  ASSERT_NE(fc, p.layers.end());
  EXPECT_TRUE(fc->pinned.has("signature")) << "a user's entry keeps its pins";
}

TEST(PlanYaml, EveryReadingMistakeInOnePass) {
  const std::string text =
      "summary:\n"
      "  devices: four\n"                       // 2:12 wrong type
      "  data_parallel: 1\n"
      "  tensor_paralel: 1\n"                   // 4:3 unknown key (not also "needs tensor_parallel")
      "  pipeline_stages: 1\n"
      "  micro_batch: 8\n"
      "  micro_batches: 1\n"
      "  schedule: 1f1b\n"
      "stages:\n"
      "  - {devices: 0, mesh: [1, 1], first_layer: tok}\n"   // 10:15 not a list; 10:5 no last_layer
      "layers:\n"
      "  - {layer: tok, signature: replicated, predicted: {time: 1}}\n";  // 12:53 unknown key
  Diagnostics d;
  parse_plan(text, "many.yaml", d);
  std::string all = dump(d);
  EXPECT_NE(all.find("many.yaml:2:12: error: expected an integer for 'devices' in the summary"), std::string::npos) << all;
  EXPECT_NE(all.find("many.yaml:4:3: error: unknown key 'tensor_paralel' in the plan's summary\n  hint: did you mean 'tensor_parallel'?"), std::string::npos) << all;
  EXPECT_EQ(all.find("needs 'tensor_parallel'"), std::string::npos) << "the misspelling says it all\n" << all;
  EXPECT_NE(all.find("many.yaml:10:15: error: expected a list for 'devices' of stage 0, got a scalar"), std::string::npos) << all;
  EXPECT_NE(all.find("many.yaml:10:5: error: stage 0 needs 'last_layer'"), std::string::npos) << all;
  EXPECT_NE(all.find("many.yaml:12:53: error: unknown key 'time' in the predicted values of layer 'tok'"), std::string::npos) << all;
  EXPECT_EQ(d.size(), 5u) << all;
}

TEST(PlanYaml, ReadPlanNamesAMissingFile) {
  Diagnostics d;
  read_plan("/nonexistent/plan.yaml", d);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_NE(d.all()[0].format().find("/nonexistent/plan.yaml"), std::string::npos) << dump(d);
}

TEST(Validate, PlanBuiltInCodeIsReportedWithoutLocations) {
  graph::Graph g = model_graph("tiny_gpt.yaml", 8);
  Plan p = single_device_plan(g, 8, 0);
  p.layers[6].signature = "colum";
  Diagnostics d;
  validate_plan(p, g, 8, cpu(1), d);
  ASSERT_EQ(d.size(), 1u) << dump(d);
  EXPECT_EQ(d.all()[0].format(),
            "error: layer 'h.0.fc' (linear) has no split signature 'colum'; it offers: replicated, data, rows1, "
            "column, row, partial\n  hint: did you mean 'column'?");
}

}  // namespace

// Grouped-query attention under a tensor group: a head split keeps each q head with its kv head, so `heads` is valid
// for a tensor group dividing kv_heads (heads 4, kv_heads 2: tp 2) and refused at the layer's tensor_parallel for one
// that does not (tp 4: in_proj's k and v parts hold 2 heads each), naming the parts; `data` validates for both.
TEST(PlanValidate, AGroupedQueryAttentionHeadSplitNeedsTpDividingKvHeads) {
  const std::string model =
      "name: gqa\ninputs:\n  x: {shape: [6, 16]}\n  y: {shape: [6, 16]}\nlayers:\n"
      "  - {name: attn, op: attention, heads: 4, kv_heads: 2, rope_theta: 10000, causal: true, from: x}\n"
      "  - {name: loss, op: mse_loss, from: [attn, y]}\noutputs: [loss]\n";
  Diagnostics md;
  io::ModelSpec m = io::parse_model(model, "gqa.yaml", {}, md);
  ASSERT_TRUE(md.empty()) << dump(md);
  const graph::Graph g = graph::build_graph(m, 8);
  auto plan = [](int tp, const std::string& sig) {
    const std::string t = std::to_string(tp);
    std::string devices = "0";
    for (int i = 1; i < tp; ++i) devices += ", " + std::to_string(i);
    return "summary:\n  devices: " + t + "\n  data_parallel: 1\n  tensor_parallel: " + t +
           "\n  pipeline_stages: 1\n  micro_batch: 8\n  micro_batches: 1\n  schedule: gpipe\nstages:\n"
           "  - {devices: [" + devices + "], mesh: [1, " + t + "], first_layer: attn, last_layer: loss}\n"
           "layers:\n  - {layer: attn, signature: " + sig + ", tensor_parallel: " + t + "}\n";
  };
  auto validate = [&](int tp, const std::string& sig) {
    Diagnostics d;
    Plan p = parse_plan(plan(tp, sig), sig + ".yaml", d);
    EXPECT_TRUE(d.empty()) << dump(d);
    validate_plan(p, g, 8, cpu(tp), d);
    return d;
  };
  for (int tp : {2, 4}) {
    SCOPED_TRACE("tp " + std::to_string(tp));
    EXPECT_TRUE(validate(tp, "data").empty());
  }
  EXPECT_TRUE(validate(2, "heads").empty()) << dump(validate(2, "heads"));
  Diagnostics d = validate(4, "heads");
  ASSERT_EQ(d.size(), 1u) << dump(d);
  EXPECT_EQ(d.all()[0].loc.str(), "heads.yaml:12:54");
  EXPECT_NE(d.all()[0].message.find("layer 'attn' (attention): signature 'heads' splits 'attn.in_proj_weight' [32, 16] "
                                    "along axis 0 in parts of 4, 2 and 2 units (heads) each into 4 whole-unit chunks"),
            std::string::npos)
      << dump(d);
  EXPECT_NE(d.all()[0].hint.find("kv_heads"), std::string::npos) << dump(d);
}
