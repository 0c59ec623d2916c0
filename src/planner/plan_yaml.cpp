// The plan file: writing a Plan as YAML (summary first, then stages, then layers; the same plan gives the
// same bytes) and reading one back with file:line:col on every mistake and a pin for every field written.
// Reading checks syntax, keys, types and required fields only; values are validate_plan's business.
#include <algorithm>
#include <charconv>
#include <climits>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <optional>

#include "io/expr.h"
#include "io/yaml_source.h"
#include "planner/plan.h"

namespace braid::planner {

// ---- writing ------------------------------------------------------------------------------------------------
namespace {

// Shortest text that reads back as the same double ("0.1", "2", "1e-05").
std::string fmt_double(double x) {
  BRAID_ASSERT(std::isfinite(x), "plan values must be finite, got ", x);
  if (x == 0) return "0";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, x);
  BRAID_ASSERT(r.ec == std::errc(), "to_chars failed");
  return std::string(buf, r.ptr);
}

bool is_number_like(const std::string& s) {
  if (s.empty()) return false;
  char* end = nullptr;
  std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

// A string as a YAML scalar: plain where that reads back as the same string, double-quoted otherwise.
std::string scalar(const std::string& s) {
  static const char* kWords[] = {"true", "True", "TRUE", "false", "False", "FALSE", "yes", "no", "on",
                                 "off", "null", "Null", "NULL", "~", "y", "n", "Y", "N"};
  bool plain = !s.empty() && s[0] != '-' && s[0] != '.' && !is_number_like(s);
  for (char c : s)
    plain &= (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
  for (const char* w : kWords) plain &= s != w;
  if (plain) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\', out += c;
    else if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else out += c;
  }
  return out + "\"";
}

template <typename T>
std::string int_list(const std::vector<T>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + "]";
}

// "key: value" pairs of a flow mapping, "{a: 1, b: 2}".
struct Flow {
  std::vector<std::string> items;
  void add(const std::string& key, const std::string& value) { items.push_back(key + ": " + value); }
  bool empty() const { return items.empty(); }
  std::string str() const {
    std::string out = "{";
    for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + items[i];
    return out + "}";
  }
};

// A number field written when it was pinned or holds a value.
void add_number(Flow& f, const Pins& pins, const std::string& pin_key, const std::string& key, double v) {
  if (v != 0 || pins.has(pin_key)) f.add(key, fmt_double(v));
}

std::string summary_line(const std::string& key, const std::string& value, const char* comment) {
  std::string line = "  " + key + ": " + value;
  if (line.size() < 27) line.resize(27, ' ');
  return line + " # " + comment + "\n";
}

}  // namespace

std::string to_yaml(const Plan& plan) {
  const Summary& s = plan.summary;
  std::string out = "# braid plan file: see docs/plan_file.md\n";
  out += "summary:\n";
  out += summary_line("devices", std::to_string(s.devices), "distinct devices the stages use");
  out += summary_line("data_parallel", std::to_string(s.data_parallel), "replicas of the whole model");
  out += summary_line("tensor_parallel", std::to_string(s.tensor_parallel), "largest group a layer is split over");
  out += summary_line("pipeline_stages", std::to_string(s.pipeline_stages), "device groups the layers are cut across");
  out += summary_line("virtual_stages", std::to_string(s.virtual_stages), "model chunks per device group");
  out += summary_line("micro_batch", std::to_string(s.micro_batch), "samples per micro-batch and replica");
  out += summary_line("micro_batches", std::to_string(s.micro_batches), "per optimizer step and replica");
  out += summary_line("schedule", scalar(s.schedule), "gpipe | 1f1b | interleaved");
  if (s.zero != 0 || s.pinned.has("zero"))
    out += summary_line("zero", std::to_string(s.zero), "optimizer-state sharding (ZeRO stage): 0 | 1 | 2 | 3");
  if (s.sequence_parallel || s.pinned.has("sequence_parallel"))
    out += summary_line("sequence_parallel", s.sequence_parallel ? "true" : "false",
                        "norms, dropout, residual adds split on the sequence inside tensor groups");
  if (s.recompute != "none" || s.pinned.has("recompute"))
    out += summary_line("recompute", scalar(s.recompute), "activation recomputation: none | full | selective");
  Flow pred;
  add_number(pred, s.pinned, "predicted.step_time_s", "step_time_s", s.predicted.step_time_s);
  add_number(pred, s.pinned, "predicted.tflops_per_device", "tflops_per_device", s.predicted.tflops_per_device);
  add_number(pred, s.pinned, "predicted.peak_memory_gb", "peak_memory_gb", s.predicted.peak_memory_gb);
  if (!s.predicted.bound_by.empty() || s.pinned.has("predicted.bound_by")) pred.add("bound_by", scalar(s.predicted.bound_by));
  if (!pred.empty()) out += "  predicted: " + pred.str() + "\n";

  out += plan.stages.empty() ? "stages: []\n" : "stages:\n";
  for (const auto& st : plan.stages) {
    Flow f;
    f.add("devices", int_list(st.devices));
    f.add("mesh", int_list(st.mesh));
    f.add("first_layer", scalar(st.first_layer));
    f.add("last_layer", scalar(st.last_layer));
    if (s.virtual_stages > 1 || st.pinned.has("virtual")) f.add("virtual", std::to_string(st.virtual_index));
    out += "  - " + f.str() + "\n";
  }

  if (!plan.layers.empty() || plan.pinned.has("layers")) out += plan.layers.empty() ? "layers: []\n" : "layers:\n";
  for (const auto& l : plan.layers) {
    Flow f;
    f.add("layer", scalar(l.layer));
    f.add("signature", scalar(l.signature));
    f.add("tensor_parallel", std::to_string(l.tensor_parallel));
    if (!l.recompute.empty()) f.add("recompute", scalar(l.recompute));
    Flow p;
    add_number(p, l.pinned, "predicted.time_s", "time_s", l.predicted_time_s);
    add_number(p, l.pinned, "predicted.memory_gb", "memory_gb", l.predicted_memory_gb);
    if (!p.empty()) f.add("predicted", p.str());
    out += "  - " + f.str() + "\n";
  }
  return out;
}

// ---- reading ------------------------------------------------------------------------------------------------
namespace {

using io::YNode;

std::string quote(const std::string& s) { return "'" + s + "'"; }

// An unknown key of `map` (one not in `allowed`) is a misspelling of `key`: its error already says so.
bool misspelt(const YNode& map, const std::string& key, const std::vector<std::string>& allowed) {
  for (const auto& k : map.keys())
    if (std::find(allowed.begin(), allowed.end(), k) == allowed.end() && did_you_mean(k, allowed) == key) return true;
  return false;
}

// Checks the keys of `map`: unknown ones (with did-you-mean), and missing required ones unless misspelt.
void check_map(const YNode& map, const std::vector<std::string>& allowed, const std::vector<std::string>& required,
               const std::string& what, Diagnostics& diags) {
  io::check_keys(map, allowed, what, diags);
  for (const auto& k : required)
    if (!map.get(k) && !misspelt(map, k, allowed)) diags.error(map.loc, what + " needs " + quote(k));
}

class Reader {
 public:
  explicit Reader(Diagnostics& diags) : diags_(diags) {}

  // `map` must be a mapping; reports and returns false otherwise.
  bool expect_map(const YNode& n, const std::string& what, const std::string& example) {
    if (n.is_map()) return true;
    diags_.error(n.loc, "expected a mapping for " + what + ", got " + n.kind_name(), "e.g. " + example);
    return false;
  }

  // A plan file has no vars: a bare word where a number belongs is a wrong type, not an unknown var.
  bool numeric(const YNode& n, const std::string& what, const std::string& expected) {
    if (!n.is_scalar() || n.quoted || n.scalar.empty()) return true;  // eval_* reports these
    bool word = std::isalpha(static_cast<unsigned char>(n.scalar[0])) || n.scalar[0] == '_';
    for (char c : n.scalar) word &= std::isalnum(static_cast<unsigned char>(c)) || c == '_';
    if (word) {
      diags_.error(n.loc, "expected " + expected + " for " + what + ", got '" + n.scalar + "'");
      return false;
    }
    return true;
  }

  std::optional<int64_t> int64(const YNode& map, const std::string& key, const std::string& what, Pins& pins) {
    const YNode* v = map.get(key);
    if (!v || !numeric(*v, what, "an integer")) return std::nullopt;
    auto x = io::eval_int(*v, {}, what, diags_);
    if (x) pins.set(key, v->loc);
    return x;
  }

  // An integer that must fit an int (device ids and counts); larger values are an error here.
  std::optional<int> int32(const YNode& n, const std::string& what) {
    if (!numeric(n, what, "an integer")) return std::nullopt;
    auto x = io::eval_int(n, {}, what, diags_);
    if (!x) return std::nullopt;
    if (*x < INT_MIN / 2 || *x > INT_MAX / 2) {
      diags_.error(n.loc, what + " is out of range: " + std::to_string(*x));
      return std::nullopt;
    }
    return static_cast<int>(*x);
  }

  void int32_field(const YNode& map, const std::string& key, const std::string& what, Pins& pins, int* out) {
    const YNode* v = map.get(key);
    if (!v) return;
    if (auto x = int32(*v, what)) {
      *out = *x;
      pins.set(key, v->loc);
    }
  }

  void number_field(const YNode& map, const std::string& key, const std::string& what, Pins& pins,
                    const std::string& pin_key, double* out) {
    const YNode* v = map.get(key);
    if (!v || !numeric(*v, what, "a number")) return;
    auto x = io::eval_float(*v, {}, what, diags_);
    if (!x) return;
    if (!std::isfinite(*x)) {
      diags_.error(v->loc, what + " must be finite");
      return;
    }
    *out = *x;
    pins.set(pin_key, v->loc);
  }

  void string_field(const YNode& map, const std::string& key, const std::string& what, Pins& pins,
                    const std::string& pin_key, std::string* out) {
    const YNode* v = map.get(key);
    if (!v) return;
    auto x = io::eval_string(*v, what, diags_);
    if (!x) return;
    if (x->empty()) {
      diags_.error(v->loc, what + " is empty");
      return;
    }
    *out = *x;
    pins.set(pin_key, v->loc);
  }

  // A list of integers; `locs` (optional) gets each element's place.
  template <typename T>
  void int_list(const YNode& map, const std::string& key, const std::string& what, const std::string& example,
                Pins& pins, std::vector<T>* out, std::vector<SourceLoc>* locs) {
    const YNode* v = map.get(key);
    if (!v) return;
    if (!v->is_seq()) {
      diags_.error(v->loc, "expected a list for " + what + ", got " + v->kind_name(), "e.g. " + example);
      return;
    }
    bool ok = true;
    out->clear();
    if (locs) locs->clear();
    for (const auto& e : v->seq) {
      auto x = int32(e, "an entry of " + what);
      ok &= x.has_value();
      out->push_back(static_cast<T>(x.value_or(0)));
      if (locs) locs->push_back(e.loc);
    }
    if (ok) pins.set(key, v->loc);
  }

  void summary(const YNode& n, Summary& s) {
    s.loc = n.loc;
    if (!expect_map(n, "'summary'", "summary: {devices: 1, data_parallel: 1, ...}")) return;
    check_map(n,
              {"devices", "data_parallel", "tensor_parallel", "pipeline_stages", "virtual_stages", "micro_batch",
               "micro_batches", "schedule", "recompute", "zero", "sequence_parallel", "predicted"},
              {"devices", "data_parallel", "tensor_parallel", "pipeline_stages", "micro_batch", "micro_batches",
               "schedule"},
              "the plan's summary", diags_);
    auto what = [](const std::string& k) { return quote(k) + " in the summary"; };
    int32_field(n, "devices", what("devices"), s.pinned, &s.devices);
    int32_field(n, "data_parallel", what("data_parallel"), s.pinned, &s.data_parallel);
    int32_field(n, "tensor_parallel", what("tensor_parallel"), s.pinned, &s.tensor_parallel);
    int32_field(n, "pipeline_stages", what("pipeline_stages"), s.pinned, &s.pipeline_stages);
    int32_field(n, "virtual_stages", what("virtual_stages"), s.pinned, &s.virtual_stages);
    if (auto x = int64(n, "micro_batch", what("micro_batch"), s.pinned)) s.micro_batch = *x;
    if (auto x = int64(n, "micro_batches", what("micro_batches"), s.pinned)) s.micro_batches = *x;
    string_field(n, "schedule", what("schedule"), s.pinned, "schedule", &s.schedule);
    string_field(n, "recompute", what("recompute"), s.pinned, "recompute", &s.recompute);
    int32_field(n, "zero", what("zero"), s.pinned, &s.zero);
    if (const YNode* v = n.get("sequence_parallel"))
      if (auto b = io::eval_bool(*v, what("sequence_parallel"), diags_)) {
        s.sequence_parallel = *b;
        s.pinned.set("sequence_parallel", v->loc);
      }
    if (const YNode* p = n.get("predicted")) {
      if (!expect_map(*p, "'predicted' in the summary", "predicted: {step_time_s: 2.8, bound_by: compute}")) return;
      io::check_keys(*p, {"step_time_s", "tflops_per_device", "peak_memory_gb", "bound_by"},
                     "the summary's predicted", diags_);
      auto pw = [](const std::string& k) { return quote(k) + " in the summary's predicted"; };
      number_field(*p, "step_time_s", pw("step_time_s"), s.pinned, "predicted.step_time_s", &s.predicted.step_time_s);
      number_field(*p, "tflops_per_device", pw("tflops_per_device"), s.pinned, "predicted.tflops_per_device",
                   &s.predicted.tflops_per_device);
      number_field(*p, "peak_memory_gb", pw("peak_memory_gb"), s.pinned, "predicted.peak_memory_gb",
                   &s.predicted.peak_memory_gb);
      string_field(*p, "bound_by", pw("bound_by"), s.pinned, "predicted.bound_by", &s.predicted.bound_by);
    }
  }

  void stage(const YNode& n, int index, StagePlan& st) {
    st.loc = n.loc;
    std::string who = "stage " + std::to_string(index);
    if (!expect_map(n, who, "- {devices: [0, 1], mesh: [2, 1], first_layer: tok, last_layer: loss}")) return;
    check_map(n, {"devices", "mesh", "first_layer", "last_layer", "virtual"},
              {"devices", "mesh", "first_layer", "last_layer"}, who, diags_);
    auto what = [&](const std::string& k) { return quote(k) + " of " + who; };
    int_list(n, "devices", what("devices"), "devices: [0, 1]", st.pinned, &st.devices, &st.device_locs);
    int_list(n, "mesh", what("mesh"), "mesh: [2, 1] (data-parallel x tensor)", st.pinned, &st.mesh, nullptr);
    string_field(n, "first_layer", what("first_layer"), st.pinned, "first_layer", &st.first_layer);
    string_field(n, "last_layer", what("last_layer"), st.pinned, "last_layer", &st.last_layer);
    int32_field(n, "virtual", what("virtual"), st.pinned, &st.virtual_index);
  }

  void layer(const YNode& n, int index, LayerPlan& l) {
    l.loc = n.loc;
    std::string who = "layer entry " + std::to_string(index);
    if (!expect_map(n, who, "- {layer: h.0.fc, signature: column, tensor_parallel: 2}")) return;
    check_map(n, {"layer", "signature", "tensor_parallel", "recompute", "predicted"}, {"layer", "signature"}, who,
              diags_);
    string_field(n, "layer", quote("layer") + " of " + who, l.pinned, "layer", &l.layer);
    if (!l.layer.empty()) who = "layer " + quote(l.layer);
    auto what = [&](const std::string& k) { return quote(k) + " of " + who; };
    string_field(n, "signature", what("signature"), l.pinned, "signature", &l.signature);
    int32_field(n, "tensor_parallel", what("tensor_parallel"), l.pinned, &l.tensor_parallel);
    string_field(n, "recompute", what("recompute"), l.pinned, "recompute", &l.recompute);
    if (const YNode* p = n.get("predicted")) {
      if (!expect_map(*p, what("predicted"), "predicted: {time_s: 0.001, memory_gb: 0.5}")) return;
      io::check_keys(*p, {"time_s", "memory_gb"}, "the predicted values of " + who, diags_);
      number_field(*p, "time_s", what("predicted.time_s"), l.pinned, "predicted.time_s", &l.predicted_time_s);
      number_field(*p, "memory_gb", what("predicted.memory_gb"), l.pinned, "predicted.memory_gb",
                   &l.predicted_memory_gb);
    }
  }

 private:
  Diagnostics& diags_;
};

}  // namespace

// The plan held by a parsed YAML tree (null after a syntax error, already reported).
static Plan plan_from_yaml(const io::YNode& root, const std::string& path, bool failed, Diagnostics& diags) {
  Plan plan;
  plan.loc = SourceLoc{path, 1, 1};
  if (failed && root.is_null()) return plan;
  Reader r(diags);
  if (!r.expect_map(root, "the plan file", "summary: ...\nstages: ...\nlayers: ...")) return plan;
  const std::vector<std::string> top = {"summary", "stages", "layers"};
  io::check_keys(root, top, "the plan file", diags);
  // 1. The summary.
  if (const io::YNode* s = root.get("summary")) {
    plan.pinned.set("summary", s->loc);
    r.summary(*s, plan.summary);
  } else if (!misspelt(root, "summary", top)) {
    diags.error(root.loc, "the plan file needs 'summary'",
                "e.g. summary: {devices: 1, data_parallel: 1, tensor_parallel: 1, pipeline_stages: 1, "
                "micro_batch: 8, micro_batches: 1, schedule: 1f1b}");
  }
  // 2. The stages, in pipeline order.
  if (const io::YNode* s = root.get("stages")) {
    plan.pinned.set("stages", s->loc);
    if (!s->is_seq()) {
      diags.error(s->loc, "expected a list of stages for 'stages', got " + s->kind_name(),
                  "e.g. stages:\n    - {devices: [0], mesh: [1, 1], first_layer: tok, last_layer: loss}");
    } else {
      for (size_t i = 0; i < s->seq.size(); ++i) r.stage(s->seq[i], static_cast<int>(i), plan.stages.emplace_back());
    }
  } else if (!misspelt(root, "stages", top)) {
    diags.error(root.loc, "the plan file needs 'stages'",
                "e.g. stages:\n    - {devices: [0], mesh: [1, 1], first_layer: tok, last_layer: loss}");
  }
  // Unwritten chunk indices follow from the layout: stage i is chunk i / pipeline_stages (interleaved only).
  for (size_t i = 0; i < plan.stages.size(); ++i) {
    StagePlan& st = plan.stages[i];
    if (!st.pinned.has("virtual") && plan.summary.schedule == "interleaved" && plan.summary.pipeline_stages >= 1)
      st.virtual_index = static_cast<int>(i) / plan.summary.pipeline_stages;
  }
  // 3. Layer entries (optional, any subset of the layers).
  if (const io::YNode* l = root.get("layers")) {
    plan.pinned.set("layers", l->loc);
    if (l->is_seq()) {
      for (size_t i = 0; i < l->seq.size(); ++i) r.layer(l->seq[i], static_cast<int>(i), plan.layers.emplace_back());
    } else if (!l->is_null()) {
      diags.error(l->loc, "expected a list of layer entries for 'layers', got " + l->kind_name(),
                  "e.g. layers:\n    - {layer: h.0.fc, signature: column, tensor_parallel: 2}");
    }
  }
  return plan;
}

Plan parse_plan(const std::string& text, const std::string& path, Diagnostics& diags) {
  size_t before = diags.size();
  io::YNode root = io::parse_yaml(text, path, diags);
  return plan_from_yaml(root, path, diags.size() > before, diags);
}

Plan read_plan(const std::string& path, Diagnostics& diags) {
  size_t before = diags.size();
  io::YNode root = io::load_yaml_file(path, diags);
  return plan_from_yaml(root, path, diags.size() > before, diags);
}

}  // namespace braid::planner
