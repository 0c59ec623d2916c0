// Device strings, pins, the single-device plan and default layer entries. The YAML form lives in
// plan_yaml.cpp, validation in plan_validate.cpp.
#include "planner/plan.h"

#include <atomic>
#include <cstdlib>
#include <set>

namespace braid::planner {

static bool parse_int(const std::string& s, int* out) {
  if (s.empty() || s.size() > 6) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  *out = std::atoi(s.c_str());
  return true;
}

static std::atomic<int64_t> g_parses{0};

int64_t parse_count() { return g_parses.load(std::memory_order_relaxed); }

bool parse_devices(const std::string& text, DeviceSpec* out, std::string* err) {
  g_parses.fetch_add(1, std::memory_order_relaxed);
  DeviceSpec d;
  auto colon = text.find(':');
  d.kind = text.substr(0, colon);
  if (d.kind != "cpu" && d.kind != "cuda") {
    *err = "unknown device kind '" + d.kind + "'; expected cpu or cuda";
    return false;
  }
  if (colon == std::string::npos) {
    d.count = 1;
    d.ids = {0};
  } else {
    std::string rest = text.substr(colon + 1);
    int n = 0;
    if (d.kind == "cpu") {
      if (!parse_int(rest, &n) || n < 1 || n > 1024) {
        *err = "cpu:N needs a device count from 1 to 1024, got '" + rest + "'";
        return false;
      }
      d.count = n;
      for (int i = 0; i < n; ++i) d.ids.push_back(i);
    } else {
      size_t start = 0;
      while (start <= rest.size()) {
        size_t comma = rest.find(',', start);
        std::string item = rest.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        auto dash = item.find('-');
        int a = 0, b = 0;
        if (dash == std::string::npos ? !parse_int(item, &a) : !(parse_int(item.substr(0, dash), &a) && parse_int(item.substr(dash + 1), &b))) {
          *err = "bad device list '" + rest + "'; expected e.g. cuda:0-7 or cuda:0,2";
          return false;
        }
        if (dash == std::string::npos) b = a;
        if (b < a) {
          *err = "device range " + item + " runs backwards";
          return false;
        }
        for (int i = a; i <= b; ++i) d.ids.push_back(i);
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
      d.count = static_cast<int>(d.ids.size());
    }
  }
  *out = d;
  return true;
}

SourceLoc Pins::loc(const std::string& key, const SourceLoc& fallback) const {
  auto it = at.find(key);
  return it == at.end() ? fallback : it->second;
}

static LayerPlan default_layer(const std::string& name) {
  LayerPlan l;
  l.layer = name;
  l.signature = "replicated";
  return l;
}

const std::string& recompute_of(const Plan& plan, const std::string& layer) {
  for (const auto& l : plan.layers)
    if (l.layer == layer && !l.recompute.empty()) return l.recompute;
  return plan.summary.recompute;
}

Plan single_device_plan(int64_t batch, int64_t micro_batch) {
  Plan p;
  p.summary.micro_batch = micro_batch > 0 ? micro_batch : batch;
  p.summary.micro_batches = p.summary.micro_batch > 0 ? batch / p.summary.micro_batch : 1;
  return p;
}

Plan single_device_plan(const graph::Graph& g, int64_t batch, int64_t micro_batch) {
  Plan p = single_device_plan(batch, micro_batch);
  auto fwd = forward_layers(g);
  if (fwd.empty()) return p;
  StagePlan s;
  s.devices = {0};
  s.mesh = {1, 1};
  s.first_layer = fwd.front()->layer;
  s.last_layer = fwd.back()->layer;
  p.stages.push_back(s);
  for (const graph::Node* n : fwd) p.layers.push_back(default_layer(n->layer));
  return p;
}

std::vector<const graph::Node*> forward_layers(const graph::Graph& g) {
  std::vector<const graph::Node*> out;
  for (const auto& n : g.nodes())
    if (!n.backward) out.push_back(&n);
  return out;
}

void add_default_layers(Plan& plan, const graph::Graph& g) {
  std::map<std::string, LayerPlan> given;
  std::vector<LayerPlan> unknown;
  std::set<std::string> names;
  for (const graph::Node* n : forward_layers(g)) names.insert(n->layer);
  for (auto& l : plan.layers) {
    if (!names.count(l.layer) || given.count(l.layer)) unknown.push_back(std::move(l));
    else given.emplace(l.layer, std::move(l));
  }
  plan.layers.clear();
  for (const graph::Node* n : forward_layers(g)) {
    auto it = given.find(n->layer);
    plan.layers.push_back(it != given.end() ? std::move(it->second) : default_layer(n->layer));
  }
  for (auto& l : unknown) plan.layers.push_back(std::move(l));
}

}  // namespace braid::planner
