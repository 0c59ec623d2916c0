// The planner's search (planner/search.h): configurations and the cut DP over the stage intervals of
// search_intervals.h (the layer DP per interval, with fronts shared by identical blocks).
#include "planner/search.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <tuple>

#include "planner/layer_cost.h"
#include "planner/search_cut.h"
#include "planner/search_intervals.h"

namespace braid::planner {
namespace {

using namespace search_detail;

// ---- the search ------------------------------------------------------------------------------------------------
std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> d;
  for (int64_t k = 1; k <= n; ++k)
    if (n % k == 0) d.push_back(k);
  return d;
}

struct Config {
  int dp, tp, p, v;
  int64_t b, m;
  std::string schedule;
  int zero = 0;
  bool rc = false;  // the blocks' recomputation searched (unit_modes(true)); pinned modes apply either way
  double lower_bound = 0;
  double zero_bound = 0;     // lower_bound with the ZeRO stage's collectives (Searcher::zero_bound)
  double key = 0;            // the shape's visiting key: the least zero_bound of its variants that may fit
  size_t order = 0;          // its place by lower_bound alone (enumeration order among equals): ties go to the lower
  double memory_needed = 0;  // a lower bound on the memory one model chunk needs (memory_fits)
};

// The same mesh, micro-batching and schedule: variants (ZeRO stage, recomputation) of one shape.
bool same_shape(const Config& a, const Config& b) {
  return a.dp == b.dp && a.tp == b.tp && a.p == b.p && a.v == b.v && a.b == b.b && a.m == b.m && a.schedule == b.schedule;
}

class Searcher {
 public:
  Searcher(const graph::Graph& g, const CostModel& m, const TrainSettings& ts, const SearchOptions& o)
      : g_(g), m_(m), ts_(ts), o_(o), cl_(m.cluster()) {}

  SearchResult run() {
    auto t0 = std::chrono::steady_clock::now();
    SearchResult r;
    fwd_ = forward_layers(g_);
    if (fwd_.empty()) {
      r.why_none = "the graph has no layers";
      return r;
    }
    read_pins();
    bounds_ = unit_bounds(fwd_, forced_cuts_);
    std::map<size_t, int> node_layer;
    for (size_t i = 0; i < fwd_.size(); ++i) node_layer[fwd_[i]->id.idx()] = static_cast<int>(i);
    units_ = static_cast<int>(bounds_.size()) - 1;
    // A parameter several layers use (linear's `tie`) lives on one stage: no cut between its first and last user
    // (each stage would hold a copy of its own, and nothing sums their gradients).
    for (const auto& p : g_.params()) {
      int lo = static_cast<int>(fwd_.size()), hi = -1;
      for (NodeId c : g_.value(p.value).consumers)
        if (auto it = node_layer.find(c.idx()); it != node_layer.end()) lo = std::min(lo, it->second), hi = std::max(hi, it->second);
      for (int j = 1; j < units_; ++j)
        if (bounds_[static_cast<size_t>(j)] > lo && bounds_[static_cast<size_t>(j)] <= hi) no_cut_.insert(j);
    }
    // Last forward layer using each value (-1: none).
    last_use_.assign(g_.values().size(), -1);
    for (const auto& v : g_.values())
      for (NodeId c : v.consumers) {
        auto it = node_layer.find(c.idx());
        if (it != node_layer.end()) last_use_[v.id.idx()] = std::max(last_use_[v.id.idx()], it->second);
      }
    int n = o_.devices > 0 ? o_.devices : cl_.devices();
    std::vector<Config> configs = enumerate(n);
    r.stats.configs = static_cast<int>(configs.size());
    // The best plan of each of the K best shapes by the formula, in its order (ties: the earlier shape first).
    // K > 1 only where predict() simulates (shared cores): search() re-ranks them by it.
    const size_t K = simulates(cl_) ? static_cast<size_t>(std::max(1, o_.rerank)) : 1;
    auto threshold = [&]() { return top_.size() < K ? kInfeasible : top_.back().searched_step_time_s; };
    // Shapes are visited by key (enumerate()), ties between plans broken by `order`: the plan the search keeps is the
    // least (step time, order), as when shapes were visited by order alone and the first of equal times kept.
    std::vector<size_t> top_order;  // order of each entry of top_
    auto beats = [&](double t, size_t order) {
      if (top_.size() < K) return true;
      const double thr = top_.back().searched_step_time_s;
      return t < thr || (t == thr && order < top_order.back());
    };
    const Config* least = nullptr;  // the shape needing the least memory, for the reason when none fits
    int memory_pruned = 0;
    // ZeRO stages 2 and 3 shard what stage 1 keeps whole for memory's sake: a shape is searched under them only
    // where the stage below it was short of memory (some stage option did not fit), else they cannot let a faster
    // plan fit. (The variants of one shape are adjacent: stable sort, equal lower bounds.)
    // Likewise the blocks' recomputation: only adds time, so a shape is searched with it only where the search
    // without it (same ZeRO stage) was short of memory. limited[z]: stage z without recomputation was.
    const Config* shape = nullptr;
    bool limited_at[4] = {true, true, true, true};
    for (const Config& c : configs) {
      if (!beats(c.key, c.order)) {  // sorted by key
        if (c.key > threshold()) break;
        continue;
      }
      if (!least || c.memory_needed < least->memory_needed ||
          (c.memory_needed == least->memory_needed && c.order < least->order))
        least = &c;
      if (!shape || !same_shape(*shape, c)) {
        shape = &c;
        for (bool& x : limited_at) x = true;
      }
      const int z = std::clamp(c.zero, 0, 3);
      if (c.rc && !limited_at[z]) continue;
      if (!c.rc && z >= 2 && !limited_at[z - 1]) {
        limited_at[z] = false;
        continue;
      }
      if (c.memory_needed > cl_.device.memory_bytes / c.v) {
        ++memory_pruned;
        continue;
      }
      if (!beats(c.zero_bound, c.order)) continue;  // its ZeRO collectives alone make it no better
      ++r.stats.configs_searched;
      SearchResult one;
      bool limited = false;
      auto s0 = std::chrono::steady_clock::now();
      // A shape before the kept plan in order may tie with it: solve() prunes at >= its bound, so one step above.
      const double bound = top_.size() == K && c.order < top_order.back() ? std::nextafter(threshold(), kInfeasible)
                                                                           : threshold();
      double t = solve(c, bound, &one, &limited);
      solve_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - s0).count();
      for (const auto& [key, iv] : intervals_) capped_ |= iv->capped;
      // Wherever some stage option did not fit (exact). Graphs of more than 32 units searched these only where
      // nothing of the shape beat the best plan so far, which made the plan depend on the order shapes are
      // visited in; with the ZeRO bounds and the visiting keys the exact rule costs less than that did (docs/planner.md).
      if (!c.rc) limited_at[z] = limited;
      if (!one.found || !beats(t, c.order)) continue;
      size_t at = 0;
      while (at < top_.size() && (top_[at].searched_step_time_s < t ||
                                  (top_[at].searched_step_time_s == t && top_order[at] < c.order)))
        ++at;
      top_.insert(top_.begin() + static_cast<std::ptrdiff_t>(at), std::move(one));
      top_order.insert(top_order.begin() + static_cast<std::ptrdiff_t>(at), c.order);
      if (top_.size() > K) {
        top_.pop_back();
        top_order.pop_back();
      }
    }
    if (!top_.empty()) {
      r.found = true;
      r.plan = top_.front().plan;
      r.searched_step_time_s = top_.front().searched_step_time_s;
    }
    r.stats.capped = capped_;
    if (std::getenv("BRAID_SEARCH_STATS")) {
      for (const auto& [key, iv] : intervals_)
        std::fprintf(stderr, "  intervals tp %d b %lld rc %d: %d of %d distinct fronts computed\n", std::get<0>(key),
                     static_cast<long long>(std::get<1>(key)), std::get<2>(key) ? 1 : 0, iv->built(), iv->distinct());
      std::fprintf(stderr, "search: %d configs, %d searched, %zu intervals (%.2f s building them), %.2f s solving\n",
                   r.stats.configs, r.stats.configs_searched, intervals_.size(), interval_s_, solve_s_);
    }
    r.stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!r.found) {
      if (configs.empty()) {
        r.why_none = "no mesh shape, micro-batch and schedule agrees with the batch, the devices and the pins";
      } else if (memory_pruned == static_cast<int>(configs.size()) && least) {
        char buf[512];
        std::snprintf(buf, sizeof buf,
                      "no plan fits in memory: every mesh shape needs more than the %.1f GB of a device (the least: dp "
                      "%d x tp %d x pp %d, %lld micro-batches of %lld, %s, at least %.1f GB per model chunk for "
                      "parameters, gradients, optimizer state and the activations of the micro-batches in flight, with "
                      "every layer split to hold the least, with the recomputation and the ZeRO stages the search may choose)",
                      cl_.device.memory_bytes / 1e9, least->dp, least->tp, least->p,
                      static_cast<long long>(least->m), static_cast<long long>(least->b), least->schedule.c_str(),
                      least->memory_needed / 1e9);
        r.why_none = buf;
      } else {
        r.why_none = "no plan fits in memory";
      }
    }
    return r;
  }

 private:
  void read_pins() {
    if (!o_.pins) return;
    const Plan& p = *o_.pins;
    std::map<std::string, int> index;
    for (size_t i = 0; i < fwd_.size(); ++i) index[fwd_[i]->layer] = static_cast<int>(i);
    for (const auto& st : p.stages) {
      if (st.pinned.has("first_layer") && index.count(st.first_layer)) forced_cuts_.insert(index[st.first_layer]);
      if (st.pinned.has("last_layer") && index.count(st.last_layer)) forced_cuts_.insert(index[st.last_layer] + 1);
    }
    forced_cuts_.erase(0);
    forced_cuts_.erase(static_cast<int>(fwd_.size()));
    pinned_stages_ = !p.stages.empty() && std::all_of(p.stages.begin(), p.stages.end(), [](const StagePlan& s) {
      return s.pinned.has("first_layer") && s.pinned.has("last_layer");
    });
    for (const auto& l : p.layers)
      if (index.count(l.layer) && (l.pinned.has("signature") || l.pinned.has("tensor_parallel")))
        layer_pins_[index[l.layer]] = &l;
  }

  bool summary_ok(const char* key, int64_t v) const {
    if (!o_.pins || !o_.pins->summary.pinned.has(key)) return true;
    const Summary& s = o_.pins->summary;
    std::string k = key;
    int64_t want = k == "data_parallel" ? s.data_parallel : k == "tensor_parallel" ? s.tensor_parallel
                   : k == "pipeline_stages" ? s.pipeline_stages : k == "virtual_stages" ? s.virtual_stages
                   : k == "micro_batch" ? s.micro_batch : k == "micro_batches" ? s.micro_batches : s.devices;
    return v == want;
  }

  std::vector<Config> enumerate(int n) {
    std::vector<Config> out;
    const Plan* pins = o_.pins;
    for (int64_t dp : divisors(n)) {
      if (ts_.batch % dp || !summary_ok("data_parallel", dp)) continue;
      for (int64_t tp : divisors(n / dp)) {
        if (o_.tp_within_node && tp > cl_.devices_per_node && tp > 1) continue;
        int64_t p = n / dp / tp;
        if (p > units_ || !summary_ok("pipeline_stages", p) || !summary_ok("devices", n)) continue;
        if (pins && pins->summary.pinned.has("tensor_parallel") && tp % pins->summary.tensor_parallel) continue;
        if (pins) {
          bool ok = true;
          for (const auto& st : pins->stages)
            if (st.pinned.has("mesh") && (st.mesh.size() != 2 || st.mesh[0] != dp || st.mesh[1] != tp)) ok = false;
          if (!ok) continue;
        }
        for (int64_t b : divisors(ts_.batch / dp)) {
          int64_t m = ts_.batch / dp / b;
          if (!summary_ok("micro_batch", b) || !summary_ok("micro_batches", m)) continue;
          std::vector<std::pair<std::string, int>> scheds;
          if (p == 1) scheds = {{"1f1b", 1}};
          else scheds = {{"gpipe", 1}, {"1f1b", 1}};
          if (p > 1 && m % p == 0 && 2 * p <= units_) scheds.push_back({"interleaved", 2});
          for (const auto& [name, v] : scheds) {
            if (pins && pins->summary.pinned.has("schedule") && pins->summary.schedule != name) continue;
            if (!summary_ok("virtual_stages", v)) continue;
            if (pinned_stages_ && static_cast<int64_t>(pins->stages.size()) != p * v) continue;
            // ZeRO stages: 0 first (ties keep the earlier shape), more only with replicas to shard over.
            // Each ZeRO stage without, then with, the blocks' recomputation searched.
            for (int z = 0; z <= (dp > 1 ? std::max(0, o_.max_zero) : 0); ++z) {
              if (pins && pins->summary.pinned.has("zero") && pins->summary.zero != z) continue;
              for (bool rc : {false, true}) {
                if (rc && !recompute_searched()) continue;
                Config c{static_cast<int>(dp), static_cast<int>(tp), static_cast<int>(p), v, b, m, name, z, rc};
                c.lower_bound = lower_bound(c);
                c.memory_needed = memory_needed(c);
                c.zero_bound = zero_bound(c);
                out.push_back(c);
              }
            }
          }
        }
      }
    }
    std::stable_sort(out.begin(), out.end(), [](const Config& a, const Config& b) { return a.lower_bound < b.lower_bound; });
    // Each shape's variants (adjacent: equal lower bounds) share a key, the least zero_bound of those that may fit
    // (all of them pruned for memory: the lower bound), and shapes are visited by it: a shape that fits only with
    // ZeRO 2-3, whose collectives make it slow, comes after the shapes that can beat it, so the search stops first.
    for (size_t i = 0; i < out.size(); ++i) out[i].order = i;
    for (size_t i = 0; i < out.size();) {
      size_t j = i;
      double key = kInfeasible;
      while (j < out.size() && same_shape(out[j], out[i])) {
        if (out[j].memory_needed <= cl_.device.memory_bytes / out[j].v) key = std::min(key, out[j].zero_bound);
        ++j;
      }
      for (size_t q = i; q < j; ++q) out[q].key = key < kInfeasible ? key : out[q].lower_bound;
      i = j;
    }
    std::stable_sort(out.begin(), out.end(), [](const Config& a, const Config& b) { return a.key < b.key; });
    return out;
  }

  const LayerCosts& costs(int tp, int64_t b) {
    auto key = std::make_pair(tp, b);
    auto it = costs_.find(key);
    if (it != costs_.end()) return *it->second;
    std::vector<int> tg;
    for (int d = 0; d < tp; ++d) tg.push_back(d);
    auto lc = std::make_unique<LayerCosts>(g_, m_, b, tp, group_of(cl_, tg), ts_.compute, ts_.head_parallel_attention);
    return *costs_.emplace(key, std::move(lc)).first->second;
  }

  // Every layer's cheapest option, m v micro-batches on the busiest of p v stages at best (the sort key: equal for
  // every ZeRO and recomputation variant of a shape, which run() needs adjacent).
  double lower_bound(const Config& c) {
    return cheapest_total(c.tp, c.b) * (static_cast<double>(c.m) * c.v - 1 + c.p) / (static_cast<double>(c.p) * c.v);
  }
  // The sum over layers of each one's cheapest forward + backward, per (tp, b).
  double cheapest_total(int tp, int64_t b) {
    auto key = std::make_pair(tp, b);
    auto it = cheapest_.find(key);
    if (it != cheapest_.end()) return it->second;
    const LayerCosts& lc = costs(tp, b);
    double total = 0;
    for (int l = 0; l < lc.layers(); ++l) {
      double best = kInfeasible;
      for (const auto& o : lc.options(l)) best = std::min(best, o.forward_s + o.backward_s);
      total += best;
    }
    return cheapest_.emplace(key, total).first->second;
  }
  // lower_bound with ZeRO's collectives too (solve() adds them to the stages as predict() does): each micro-batch's
  // reductions and (stage 3) gathers join the stage times, the broadcasts after the optimizer (stages 1-2) the tails.
  // Each collective is a latency per tensor plus the bytes over a bandwidth (alpha-beta, affine in the bytes:
  // cost_model.cpp), so the stages' figures add up to the whole model's: all its tensors at the least parameter bytes
  // any option has (the figure grows with the bytes). Shapes whose per-micro-batch gathers alone exceed the best plan
  // (ZeRO 3 without a pipeline, at scale) are then never solved. Needs memory_needed(c) first (its sums).
  double zero_bound(const Config& c) {
    if (c.zero < 1 || c.dp < 2) return c.lower_bound;
    std::vector<int> dg;
    for (int q = 0; q < c.dp; ++q) dg.push_back(q * c.tp);
    const LayerCosts& lc = costs(c.tp, c.b);
    const double params = std::get<0>(least_bytes_.at(std::make_tuple(c.tp, c.b, c.rc)));
    const ZeroCommParts z =
        zero_comm_parts(m_, group_of(cl_, dg), params, tensors_before(lc).back(), ts_.bucket_bytes, c.zero);
    const double stages = static_cast<double>(c.p) * c.v;
    return c.lower_bound + zero_micro_batch_comm(z) * (static_cast<double>(c.m) * c.v - 1 + c.p) / stages + z.gather / stages;
  }
  // tensors_before(lc)[j]: the trainable parameter tensors of the layers before unit j (every option of a layer, at
  // any tp and micro-batch, has the same; intervals sharing a front are alike, so they have the same count). Once.
  const std::vector<int>& tensors_before(const LayerCosts& lc) {
    if (tensors_before_.empty()) {
      tensors_before_.assign(static_cast<size_t>(units_) + 1, 0);
      for (int j = 0; j < units_; ++j) {
        int n = 0;
        for (int l = bounds_[static_cast<size_t>(j)]; l < bounds_[static_cast<size_t>(j) + 1]; ++l) n += lc.options(l)[0].param_tensors;
        tensors_before_[static_cast<size_t>(j) + 1] = tensors_before_[static_cast<size_t>(j)] + n;
      }
    }
    return tensors_before_;
  }

  // A lower bound on the memory of the fullest model chunk of any plan of shape c, in O(layers + stages log
  // stages): chunk k holds c_k = (2 + states) x params + buffers and in_k x activations (in_k its micro-batches in
  // flight). With each layer's least parameter and activation bytes over its options (P, A: totals) and layers
  // made fractional, chunks of capacity M fit iff A can be spread with sum (M - in_k y_k) >= P, best filling
  // the chunks with the fewest in flight first; the least such M, by bisection. Ignores the received inputs,
  // reshard buffers and workspace (the bound stays below the truth), so no shape that fits is pruned.
  double memory_needed(const Config& c) {
    const LayerCosts& lc = costs(c.tp, c.b);
    auto key = std::make_tuple(c.tp, c.b, c.rc);
    auto it = least_bytes_.find(key);
    if (it == least_bytes_.end()) {
      // Per layer its least parameter, buffer and activation bytes over its options; per unit the least of its
      // activations under each recomputation mode it may take (selective: its layers that are not cheap; full: its
      // inputs).
      double params = 0, buffers = 0, A = 0;
      auto al = allowed(lc);
      const auto modes = unit_modes(c.rc);
      for (int u = 0; u < units_; ++u) {
        double all = 0, kept = 0;
        for (int l = bounds_[static_cast<size_t>(u)]; l < bounds_[static_cast<size_t>(u) + 1]; ++l) {
          double p = kInfeasible, bu = kInfeasible, a = kInfeasible;
          bool cheap = false;
          const auto& opts = lc.options(l);
          for (size_t k = 0; k < opts.size(); ++k) {
            if (al.count(l) && std::find(al[l].begin(), al[l].end(), static_cast<int>(k)) == al[l].end()) continue;
            p = std::min(p, opts[k].param_bytes);
            bu = std::min(bu, opts[k].buffer_bytes);
            a = std::min(a, opts[k].act_bytes);
            cheap = opts[k].cheap;
          }
          if (p == kInfeasible) p = bu = a = 0;
          params += p;
          buffers += bu;
          all += a;
          if (!cheap) kept += a;
        }
        double least = all;
        for (int m : modes[static_cast<size_t>(u)]) {
          if (m == kRecomputeSelective) least = std::min(least, kept);
          if (m == kRecomputeFull)
            least = std::min(least, lc.group_input_bytes(bounds_[static_cast<size_t>(u)], bounds_[static_cast<size_t>(u) + 1]));
        }
        A += least;
      }
      it = least_bytes_.emplace(key, std::make_tuple(params, buffers, A)).first;
    }
    // Model states are linear in the parameter bytes: the least parameters' states and the least buffers bound
    // every option's from below.
    const double P = model_states(std::get<0>(it->second), ts_, c.zero, c.dp).total() + std::get<1>(it->second);
    const double A = std::get<2>(it->second);
    const int S = c.p * c.v;
    std::vector<int> in(static_cast<size_t>(S));
    for (int k = 0; k < S; ++k) in[static_cast<size_t>(k)] = std::max(1, in_flight(c.schedule, k, c.p, c.v, c.m));
    std::sort(in.begin(), in.end());
    auto fits = [&](double M) {
      double rest = A, spare = 0;
      for (int x : in) {
        double y = std::min(rest, M / x);
        rest -= y;
        spare += M - x * y;
      }
      return rest <= 0 && spare >= P;
    };
    double lo = 0, hi = (P + A * in.back()) / 1.0 + 1;  // one chunk holding everything fits anything
    if (!fits(hi)) return hi;
    for (int q = 0; q < 60; ++q) {
      double mid = 0.5 * (lo + hi);
      (fits(mid) ? hi : lo) = mid;
    }
    return lo * (1 - 1e-9);  // below the least capacity that fits: a bound, with room for rounding
  }

  // The recomputation modes each unit may take (search_intervals.h): a pinned summary mode for every unit; else
  // none, selective and full for each instance of a repeated block (`name.<i>.*`, as lowering groups `full`),
  // none for the layers outside blocks; a unit with a layer whose recompute is pinned takes that mode.
  // Whether any unit may take a mode beyond the pinned ones (Config::rc variants exist).
  bool recompute_searched() {
    const auto& a = unit_modes(false);
    const auto& b = unit_modes(true);
    return a != b;
  }
  const std::vector<std::vector<int>>& unit_modes(bool rc) {
    auto& unit_modes_ = unit_modes_by_[rc ? 1 : 0];
    if (!unit_modes_.empty() || units_ == 0) return unit_modes_;
    auto code = [](const std::string& m) { return m == "full" ? kRecomputeFull : m == "selective" ? kRecomputeSelective : 0; };
    const bool summary_pin = o_.pins && o_.pins->summary.pinned.has("recompute");
    std::map<std::string, std::string> layer_pin;
    if (o_.pins)
      for (const auto& l : o_.pins->layers)
        if (l.pinned.has("recompute")) layer_pin[l.layer] = l.recompute;
    for (int u = 0; u < units_; ++u) {
      const int a = bounds_[static_cast<size_t>(u)], b = bounds_[static_cast<size_t>(u) + 1];
      std::vector<int> m{0};
      if (summary_pin) m = {code(o_.pins->summary.recompute)};
      else if (rc && o_.recompute && !instance_prefix(fwd_[static_cast<size_t>(a)]->layer).empty())
        m = {0, kRecomputeSelective, kRecomputeFull};
      for (int l = a; l < b; ++l) {
        auto it = layer_pin.find(fwd_[static_cast<size_t>(l)]->layer);
        if (it != layer_pin.end()) m = {code(it->second)};
      }
      unit_modes_.push_back(m);
    }
    return unit_modes_;
  }

  // Options each pinned layer may take, for this LayerCosts; and those of an unpinned layer using a parameter other
  // layers use too (linear's `tie`): the ones holding it whole, so that its users hold it alike (exec/lower.cpp
  // refuses two layouts of one parameter; a plan file may still split both users alike).
  std::map<int, std::vector<int>> allowed(const LayerCosts& lc) {
    std::map<int, std::vector<int>> out;
    for (int l = 0; l < lc.layers(); ++l) {
      if (layer_pins_.count(l)) continue;
      const graph::Node& n = lc.node(l);
      std::vector<size_t> shared;
      for (size_t k = 0; k < n.inputs.size(); ++k)
        if (lc.shared_param(n.inputs[k])) shared.push_back(k);
      if (shared.empty()) continue;
      const auto& opts = lc.options(l);
      auto& v = out[l];
      for (size_t k = 0; k < opts.size(); ++k)
        if (std::all_of(shared.begin(), shared.end(), [&](size_t i) { return opts[k].in[i] < 0; }))
          v.push_back(static_cast<int>(k));
    }
    for (const auto& [l, lp] : layer_pins_) {
      auto& v = out[l];
      const auto& opts = lc.options(l);
      for (size_t k = 0; k < opts.size(); ++k) {
        bool ok = true;
        if (lp->pinned.has("signature")) ok &= opts[k].signature == lp->signature;
        if (lp->pinned.has("tensor_parallel")) ok &= opts[k].tensor_parallel == lp->tensor_parallel;
        if (ok) v.push_back(static_cast<int>(k));
      }
    }
    return out;
  }

  Intervals& intervals(int tp, int64_t b, bool rc) {
    auto key = std::make_tuple(tp, b, rc);
    auto it = intervals_.find(key);
    if (it != intervals_.end()) return *it->second;
    const LayerCosts& lc = costs(tp, b);
    auto al = allowed(lc);
    auto iv = std::make_unique<Intervals>(lc, bounds_, last_use_, al, unit_modes(rc), o_.front_cap);
    return *intervals_.emplace(key, std::move(iv)).first->second;
  }

  double cut_bytes(const LayerCosts& lc, int at) {
    if (at <= 0 || at >= static_cast<int>(fwd_.size())) return 0;
    double bytes = 0;
    for (int i = 0; i < at; ++i)
      for (ValueId out : fwd_[static_cast<size_t>(i)]->outputs)
        if (last_use_[out.idx()] >= at) bytes += lc.value_bytes(out);
    return bytes;
  }

  struct EntryCosts {
    bool known = false;
    double states = 0, accumulate = 0, turn = 0, update = 0, weight_read = 0;
    ZeroCommParts comm;
  };
  EntryCosts entry_costs_of(const Entry& e, const Config& c, const Group& dp_group, int S, int tensors) const {
    EntryCosts ec;
    ec.known = true;
    ec.states = model_states(e.p, ts_, c.zero, c.dp).total();
    ec.accumulate = m_.grad_accumulate_time(e.p);
    ec.turn = S > 1 ? m_.switch_time(e.p) : 0;
    ec.comm = zero_comm_parts(m_, dp_group, e.p, tensors, ts_.bucket_bytes, c.zero);
    const double shard = c.zero >= 1 ? 1.0 / c.dp : 1.0;
    ec.update = m_.optimizer_time(fp32_param_bytes(e.p, ts_) * shard, ts_.optimizer_states) +
                (ts_.clip ? m_.clip_time(e.p) : 0);
    ec.weight_read = m_.weight_read_time(e.p, ts_.optimizer_states);
    return ec;
  }

  // The best plan of one configuration; returns its step time (infinity: none fits) and records it in r when
  // it beats `best`.
  double solve(const Config& c, double best, SearchResult* r, bool* memory_limited) {
    const LayerCosts& lc = costs(c.tp, c.b);
    Intervals& iv = intervals(c.tp, c.b, c.rc);
    const int S = c.p * c.v, U = units_, G = c.dp * c.tp;
    std::vector<double> cut(static_cast<size_t>(U) + 1);
    for (int j = 0; j <= U; ++j) cut[static_cast<size_t>(j)] = cut_bytes(lc, bounds_[static_cast<size_t>(j)]);
    const std::vector<int>& tensors_before = this->tensors_before(lc);
    std::vector<int> dg;
    for (int q = 0; q < c.dp; ++q) dg.push_back(q * c.tp);
    Group dp_group = group_of(cl_, dg);
    double limit = cl_.device.memory_bytes / c.v;
    auto cross = [&](int k, int k2) { return cl_.node_of((k % c.p) * G) != cl_.node_of((k2 % c.p) * G); };
    std::set<int> pinned_bounds;
    if (pinned_stages_)
      for (int j = 1; j < U; ++j)
        if (forced_cuts_.count(bounds_[static_cast<size_t>(j)])) pinned_bounds.insert(j);
    // dp[k][j]: ways to cover units [0, j) with k stages, Pareto on (max T, sum T, max tail).
    std::vector<std::vector<Cell>> dp(static_cast<size_t>(S) + 1, std::vector<Cell>(static_cast<size_t>(U) + 1));
    dp[0][0].push_back(CutItem{0, 0, 0, -1, -1, nullptr});
    const double overhead = m_.step_overhead();  // once: a virtual call per item was a part of the cut DP's time
    auto objective = [&](const CutItem& x) { return pipeline_step(x.max_t, x.sum_t, x.max_e, c.m, c.v) + overhead; };
    const double hand_off = m_.micro_batch_overhead(S > 1);
    struct Cand {
      double t, tail;
      const Entry* e;
    };
    std::vector<Cand> cands;
    // Per interval front (node) and entry, what the loop below needs of it that depends on its parameter bytes
    // alone: computed once per configuration instead of once per (stage, first unit, last unit).
    std::vector<std::vector<EntryCosts>> entry_costs(static_cast<size_t>(iv.nodes()));
    std::vector<std::pair<double, CutItem>> keyed;
    for (int k = 0; k < S; ++k) {
      int inflight = in_flight(c.schedule, k, c.p, c.v, c.m);
      for (int i = k; i < U; ++i) {
        if (dp[static_cast<size_t>(k)][static_cast<size_t>(i)].empty()) continue;
        for (int j = i + 1; j <= U - (S - k - 1); ++j) {
          if (k == S - 1 && j != U) continue;
          if (pinned_stages_ && j < U && !pinned_bounds.count(j)) continue;
          if (j < U && no_cut_.count(j)) continue;
          // No entry of [i, j) is faster than its layers' cheapest options: where those alone make the step no
          // better than `best`, the loop below would stop at its first entry; the front is not computed.
          if ((static_cast<double>(c.m) * c.v - 1 + 1.0 / c.v) * iv.least_t(i, j) >= best) continue;
          double p2p_f = k + 1 < S && cut[static_cast<size_t>(j)] > 0 ? m_.p2p_time(cut[static_cast<size_t>(j)], cross(k, k + 1)) : 0;
          double p2p_b = k > 0 && cut[static_cast<size_t>(i)] > 0 ? m_.p2p_time(cut[static_cast<size_t>(i)], cross(k, k - 1)) : 0;
          double in_bytes = k > 0 ? cut[static_cast<size_t>(i)] : 0;
          auto& cell = dp[static_cast<size_t>(k) + 1][static_cast<size_t>(j)];
          // The stage's options that fit, reduced to the Pareto front of (T, tail): all the cut DP reads of
          // an entry once its memory is checked.
          cands.clear();
          auto f0 = std::chrono::steady_clock::now();
          const std::vector<Entry>& front = iv.closed(i, j);
          interval_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - f0).count();
          std::vector<EntryCosts>& costs_of = entry_costs[static_cast<size_t>(iv.node(i, j))];
          if (costs_of.empty()) costs_of.resize(front.size());
          for (size_t q = 0; q < front.size(); ++q) {
            const Entry& e = front[q];
            // Sorted by t: a stage this slow alone makes the step no better than `best`.
            if ((static_cast<double>(c.m) * c.v - 1 + 1.0 / c.v) * e.t >= best) break;
            EntryCosts& ec = costs_of[q];
            if (!ec.known)
              ec = entry_costs_of(e, c, dp_group, S, tensors_before[static_cast<size_t>(j)] - tensors_before[static_cast<size_t>(i)]);
            double mem = e.buffers + ec.states + inflight * (e.a + in_bytes) + std::max(0.0, e.e) + e.buf +
                         (c.zero >= 3 && c.dp > 1 ? 2 * e.pm : 0);  // as predict(): gathered_bytes
            if (mem > limit) {
              *memory_limited = true;
              continue;
            }
            // As predict(): hand-offs half forward, half backward; gradient accumulation with the backward.
            const double accumulate = ec.accumulate;
            const double turn = ec.turn;
            double t = e.t + hand_off / 2 + hand_off / 2 + accumulate + turn + p2p_f + p2p_b;
            double tb = e.tb + hand_off / 2 + accumulate + turn / 2 + p2p_b, total = 0, exposed = 0;
            // As predict(): ZeRO 2 / 3's collectives of each micro-batch join its backward.
            const double zc = zero_micro_batch_comm(ec.comm);
            t += zc;
            tb += zc;
            zero_sync(ec.comm, tb, &total, &exposed);
            double tail = exposed + ec.update + ec.weight_read;
            bool dom = false;
            for (const auto& y : cands)
              if (y.t <= t && y.tail <= tail) {
                dom = true;
                break;
              }
            if (dom) continue;
            cands.erase(std::remove_if(cands.begin(), cands.end(), [&](const Cand& y) { return t <= y.t && tail <= y.tail; }),
                        cands.end());
            cands.push_back(Cand{t, tail, &e});
          }
          const auto& prev = dp[static_cast<size_t>(k)][static_cast<size_t>(i)];
          for (const Cand& cd : cands) {
            for (size_t q = 0; q < prev.size(); ++q) {
              CutItem x{std::max(prev[q].max_t, cd.t), prev[q].sum_t + cd.t, std::max(prev[q].max_e, cd.tail), i,
                        static_cast<int>(q), cd.e};
              if (objective(x) >= best) continue;
              if (cell.dominated(x)) continue;
              cell.drop_dominated_by(x);
              cell.push_back(x);
              if (static_cast<int>(cell.size()) > o_.front_cap) {
                // std::stable_sort by objective, each item's computed once.
                keyed.clear();
                for (const CutItem& y : cell.items) keyed.emplace_back(objective(y), y);
                std::stable_sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
                cell.items.resize(static_cast<size_t>(o_.front_cap));
                for (size_t q2 = 0; q2 < cell.size(); ++q2) cell.items[q2] = keyed[q2].second;
                cell.repack();
                capped_ = true;
              }
            }
          }
        }
      }
    }
    const auto& last = dp[static_cast<size_t>(S)][static_cast<size_t>(U)];
    if (last.empty()) return kInfeasible;
    size_t bi = 0;
    for (size_t q = 1; q < last.size(); ++q)
      if (objective(last[q]) < objective(last[bi])) bi = q;
    double t = objective(last[bi]);
    if (!(t < best)) return t;
    // Rebuild the plan.
    std::vector<std::pair<int, const Entry*>> stages;  // (first unit, entry), last stage first
    int j = U;
    size_t idx = bi;
    for (int k = S; k > 0; --k) {
      const CutItem& x = dp[static_cast<size_t>(k)][static_cast<size_t>(j)][idx];
      stages.emplace_back(x.prev_i, x.e);
      idx = static_cast<size_t>(x.prev_idx);
      j = x.prev_i;
    }
    std::reverse(stages.begin(), stages.end());
    r->plan = build_plan(c, lc, iv, stages);
    r->found = true;
    r->searched_step_time_s = t;
    return t;
  }

  Plan build_plan(const Config& c, const LayerCosts& lc, const Intervals& iv,
                  const std::vector<std::pair<int, const Entry*>>& stages) {
    Plan p;
    Summary& s = p.summary;
    s.devices = c.dp * c.tp * c.p;
    s.data_parallel = c.dp;
    s.pipeline_stages = c.p;
    s.virtual_stages = c.v;
    s.micro_batch = c.b;
    s.micro_batches = c.m;
    s.schedule = c.schedule;
    s.zero = c.zero;
    if (o_.pins && o_.pins->summary.pinned.has("recompute")) s.recompute = o_.pins->summary.recompute;
    int G = c.dp * c.tp, max_tp = 1;
    std::map<int, int> option;  // layer -> option
    std::map<int, int> unit_mode;  // first layer of a unit -> its recomputation (kRecompute*), when not none
    for (size_t k = 0; k < stages.size(); ++k) {
      StagePlan st;
      int d = static_cast<int>(k) % c.p;
      for (int q = 0; q < G; ++q) st.devices.push_back(d * G + q);
      st.mesh = {c.dp, c.tp};
      int a = bounds_[static_cast<size_t>(stages[k].first)];
      int b = k + 1 < stages.size() ? bounds_[static_cast<size_t>(stages[k + 1].first)] : static_cast<int>(fwd_.size());
      st.first_layer = fwd_[static_cast<size_t>(a)]->layer;
      st.last_layer = fwd_[static_cast<size_t>(b) - 1]->layer;
      st.virtual_index = static_cast<int>(k) / c.p;
      p.stages.push_back(st);
      for (int q = stages[k].second->ch; q >= 0; q = iv.choice(q).prev) {
        const Choice& ch = iv.choice(q);
        (ch.option < 0 ? unit_mode : option)[a + ch.layer] = ch.option;
      }
    }
    // Each layer of a unit recomputed (unless the summary's pinned mode covers it).
    std::string mode;
    for (size_t l = 0; l < fwd_.size(); ++l) {
      auto um = unit_mode.find(static_cast<int>(l));
      if (um != unit_mode.end()) mode = um->second == kRecomputeFull ? "full" : "selective";
      else if (std::binary_search(bounds_.begin(), bounds_.end(), static_cast<int>(l))) mode.clear();
      const std::string recompute = mode.empty() || mode == s.recompute ? std::string() : mode;
      const LayerOption& o = lc.options(static_cast<int>(l))[static_cast<size_t>(option.at(static_cast<int>(l)))];
      bool pinned = layer_pins_.count(static_cast<int>(l)) > 0;
      if (o.signature == "replicated" && o.tensor_parallel == 1 && !pinned && recompute.empty()) continue;
      LayerPlan lp;
      lp.layer = fwd_[l]->layer;
      lp.signature = o.signature;
      lp.tensor_parallel = o.tensor_parallel;
      lp.recompute = recompute;
      max_tp = std::max(max_tp, o.tensor_parallel);
      p.layers.push_back(lp);
    }
    s.tensor_parallel = max_tp;
    return p;
  }

  const graph::Graph& g_;
  const CostModel& m_;
  TrainSettings ts_;
  SearchOptions o_;
  const Cluster& cl_;
  std::vector<const graph::Node*> fwd_;
  std::vector<int> bounds_;
  std::vector<int> tensors_before_;  // per unit boundary (tensors_before)
  int units_ = 0;
  std::vector<int> last_use_;
  std::set<int> forced_cuts_;
  std::set<int> no_cut_;  // unit bounds a stage may not end at: inside a tied parameter's users
  bool pinned_stages_ = false;
  std::map<int, const LayerPlan*> layer_pins_;
  std::map<std::pair<int, int64_t>, std::unique_ptr<LayerCosts>> costs_;
  std::map<std::tuple<int, int64_t, bool>, std::unique_ptr<Intervals>> intervals_;
  std::map<std::tuple<int, int64_t, bool>, std::tuple<double, double, double>> least_bytes_;  // memory_needed's sums
  std::map<std::pair<int, int64_t>, double> cheapest_;  // cheapest_total
  std::vector<std::vector<int>> unit_modes_by_[2];  // unit_modes(rc), once each
  bool capped_ = false;
  double interval_s_ = 0, solve_s_ = 0;  // BRAID_SEARCH_STATS

 public:
  // After run(): the best plan of each of the K best shapes, best first by the formula.
  std::vector<SearchResult> top_;
};

}  // namespace

SearchResult search(const graph::Graph& g, const CostModel& model, const TrainSettings& ts, const SearchOptions& o) {
  Searcher searcher(g, model, ts, o);
  SearchResult r = searcher.run();
  if (!r.found) return r;
  // The final choice by predict()'s step time, the figure braid prints: the candidates' order is the
  // formula's, and the first of equal predictions wins (deterministic).
  bool chosen = false;
  for (SearchResult& cand : searcher.top_) {
    DeviceSpec spec;
    spec.kind = "cpu";
    spec.count = cand.plan.summary.devices;
    for (int d = 0; d < spec.count; ++d) spec.ids.push_back(d);
    Diagnostics diags;
    // ZeRO 2 and 3 are modelled, not yet run: the rest of the plan is checked as under stage 1.
    Plan checked = cand.plan;
    checked.summary.zero = std::min(checked.summary.zero, 1);
    // Modelled attention over heads (cluster planning): the rest of the plan is checked with the layer replicated.
    for (auto& l : checked.layers)
      if (l.signature == "heads") l.signature = "replicated", l.tensor_parallel = 1;
    validate_plan(checked, g, ts.batch, spec, diags);
    if (!diags.empty())
      throw InternalError("the planner produced an invalid plan: " + diags.all()[0].format() + "\n" + to_yaml(cand.plan));
    fill_predictions(cand.plan, g, model, ts);
    cand.prediction = predict(cand.plan, g, model, ts);
    ++r.stats.reranked;
    if (!chosen || cand.prediction.step_time_s < r.prediction.step_time_s) {
      r.plan = cand.plan;
      r.prediction = cand.prediction;
      r.searched_step_time_s = cand.searched_step_time_s;
      chosen = true;
    }
  }
  return r;
}

}  // namespace braid::planner
