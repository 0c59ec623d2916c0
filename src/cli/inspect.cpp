// braid inspect CKPT [--diff RUN]: what a checkpoint holds (io::describe_checkpoint) and, with --diff, how it
// differs from a run: tensors missing on either side or of another shape or dtype (against the run's graph,
// built for batch 1 without backward), and the run and model texts, compared value by value as YAML
// ("optimizer.lr: 0.05 -> 0.1"; a line diff when a text is not YAML). A readable checkpoint exits 0 whatever
// the differences; a damaged or missing one is a UserError (status 2).
#include <algorithm>
#include <sstream>

#include "cli/commands.h"
#include "graph/build.h"
#include "io/checkpoint.h"
#include "io/run_config.h"
#include "io/yaml_source.h"

namespace braid::cli {
namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// "- old" / "+ new" lines of a longest-common-subsequence diff, in order. Quadratic: for texts of up to a few
// thousand lines (run and model files); longer texts are compared by line sets.
std::vector<std::string> line_diff(const std::string& was, const std::string& now) {
  std::vector<std::string> a = lines_of(was), b = lines_of(now), out;
  if (a.size() * b.size() > 25'000'000) {
    for (const auto& l : a)
      if (std::find(b.begin(), b.end(), l) == b.end()) out.push_back("- " + l);
    for (const auto& l : b)
      if (std::find(a.begin(), a.end(), l) == a.end()) out.push_back("+ " + l);
    return out;
  }
  std::vector<std::vector<uint32_t>> lcs(a.size() + 1, std::vector<uint32_t>(b.size() + 1, 0));
  for (size_t i = a.size(); i-- > 0;)
    for (size_t j = b.size(); j-- > 0;)
      lcs[i][j] = a[i] == b[j] ? lcs[i + 1][j + 1] + 1 : std::max(lcs[i + 1][j], lcs[i][j + 1]);
  size_t i = 0, j = 0;
  while (i < a.size() || j < b.size()) {
    if (i < a.size() && j < b.size() && a[i] == b[j]) ++i, ++j;
    else if (j < b.size() && (i == a.size() || lcs[i][j + 1] >= lcs[i + 1][j])) out.push_back("+ " + b[j++]);
    else out.push_back("- " + a[i++]);
  }
  return out;
}

using Flat = std::vector<std::pair<std::string, std::string>>;

// "key.path" -> value for every leaf of a YAML tree; lists of scalars stay one value ("[1, 2]"), other lists
// are indexed ("layers[3].out").
void flatten(const io::YNode& n, const std::string& at, Flat& out) {
  auto scalar = [](const io::YNode& x) { return x.quoted ? "\"" + x.scalar + "\"" : x.scalar; };
  if (n.is_null()) out.emplace_back(at, "null");
  else if (n.is_scalar()) out.emplace_back(at, scalar(n));
  else if (n.is_map()) {
    for (const auto& [k, v] : n.map) flatten(v, at.empty() ? k.scalar : at + "." + k.scalar, out);
  } else if (std::all_of(n.seq.begin(), n.seq.end(), [](const io::YNode& x) { return x.is_scalar(); })) {
    std::string s = "[";
    for (size_t i = 0; i < n.seq.size(); ++i) s += (i ? ", " : "") + scalar(n.seq[i]);
    out.emplace_back(at, s + "]");
  } else {
    for (size_t i = 0; i < n.seq.size(); ++i) flatten(n.seq[i], at + "[" + std::to_string(i) + "]", out);
  }
}

// Value differences of two YAML texts ("~ key: old -> new", "- key: old", "+ key: new"); false when either
// text is not YAML.
bool yaml_diff(const std::string& was, const std::string& now, std::vector<std::string>& out) {
  Diagnostics diags;
  io::YNode a = io::parse_yaml(was, "<checkpoint>", diags), b = io::parse_yaml(now, "<run>", diags);
  if (!diags.empty()) return false;
  Flat fa, fb;
  flatten(a, "", fa);
  flatten(b, "", fb);
  auto find = [](const Flat& f, const std::string& k) {
    return std::find_if(f.begin(), f.end(), [&](const auto& kv) { return kv.first == k; });
  };
  for (const auto& [k, v] : fb) {
    auto it = find(fa, k);
    if (it == fa.end()) out.push_back("+ " + k + ": " + v);
    else if (it->second != v) out.push_back("~ " + k + ": " + it->second + " -> " + v);
  }
  for (const auto& [k, v] : fa)
    if (find(fb, k) == fb.end()) out.push_back("- " + k + ": " + v);
  return true;
}

void print_text_diff(FILE* out, const char* what, const std::string& ckpt_text, const std::string& run_text) {
  if (ckpt_text == run_text) {
    std::fprintf(out, "  %s: identical text\n", what);
    return;
  }
  if (ckpt_text.empty()) {
    std::fprintf(out, "  %s text: the checkpoint holds none\n", what);
    return;
  }
  std::vector<std::string> d;
  if (yaml_diff(ckpt_text, run_text, d)) {
    std::fprintf(out, "  %s: %zu value(s) differ (checkpoint -> now)%s\n", what, d.size(),
                 d.empty() ? "; the texts differ only in layout or comments" : "");
  } else {
    d = line_diff(ckpt_text, run_text);
    std::fprintf(out, "  %s text: %zu line(s) differ (- checkpoint, + now)\n", what, d.size());
  }
  const size_t shown = std::min<size_t>(d.size(), 12);
  for (size_t k = 0; k < shown; ++k) std::fprintf(out, "    %s\n", d[k].c_str());
  if (d.size() > shown) std::fprintf(out, "    ... and %zu more\n", d.size() - shown);
}

}  // namespace

int inspect(const InspectArgs& a, FILE* out) {
  const std::string path = io::CheckpointDir::resolve("", a.path);  // a folder means its latest
  io::ReadOptions ro;
  ro.allow_non_finite = true;  // inspect reports NaN/Inf per tensor instead of refusing the file
  io::Checkpoint c = io::read_checkpoint(path, ro);
  std::fputs(io::describe_checkpoint(path, c).c_str(), out);
  if (a.diff.empty()) return 0;

  io::RunConfig cfg = io::load_run_or_model(a.diff, a.sets);
  graph::BuildOptions bo;
  bo.with_backward = false;
  graph::Graph g = graph::build_graph(cfg.model, 1, bo);
  std::vector<std::pair<std::string, TensorDesc>> expected;
  for (const auto& p : g.params()) expected.emplace_back(p.name, p.spec.desc);
  std::vector<std::string> diffs = io::compare_to_model(c, expected);

  std::fprintf(out, "\ncompared with %s (model %s):\n", a.diff.c_str(), cfg.model_path.c_str());
  if (diffs.empty())
    std::fprintf(out, "  tensors: the same %zu parameters and buffers (names, shapes, dtypes)\n", expected.size());
  else
    std::fprintf(out, "  tensors: %zu difference(s)\n", diffs.size());
  for (const auto& d : diffs) std::fprintf(out, "    %s\n", d.c_str());
  if (!cfg.is_model_only) print_text_diff(out, "run", c.meta.run_text, cfg.text);
  print_text_diff(out, "model", c.meta.model_text, cfg.model.text);
  return 0;
}

}  // namespace braid::cli
