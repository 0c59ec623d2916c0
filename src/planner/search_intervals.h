// Internal to the planner's search (search.cpp): layers grouped into units (one layer, or one instance of a
// repeated block), Pareto fronts of (time, memory) choices, and the stage intervals with their shared fronts.
#pragma once
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "planner/layer_cost.h"

namespace braid::planner::search_detail {

// ---- units: one layer, or one instance of a repeated block ----------------------------------------------------
// "h.3.fc" -> "h.3." (the block instance prefix), "" when the name has no numeric component.
inline std::string instance_prefix(const std::string& name) {
  size_t pos = 0;
  while ((pos = name.find('.', pos)) != std::string::npos) {
    size_t end = name.find('.', pos + 1);
    if (end == std::string::npos) break;
    std::string mid = name.substr(pos + 1, end - pos - 1);
    if (!mid.empty() && std::all_of(mid.begin(), mid.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return name.substr(0, end + 1);
    pos = end;
  }
  return "";
}

// Unit boundaries (forward layer indices, 0 first, layers last); a cut required by a pin is always one.
inline std::vector<int> unit_bounds(const std::vector<const graph::Node*>& fwd, const std::set<int>& forced) {
  std::vector<int> b{0};
  for (size_t i = 1; i < fwd.size(); ++i) {
    std::string a = instance_prefix(fwd[i - 1]->layer), c = instance_prefix(fwd[i]->layer);
    if (a.empty() || a != c || forced.count(static_cast<int>(i))) b.push_back(static_cast<int>(i));
  }
  b.push_back(static_cast<int>(fwd.size()));
  return b;
}

// ---- Pareto fronts ------------------------------------------------------------------------------------------
struct Choice {
  int layer, option;  // layer: relative to the first layer of the stage interval it was chosen in
  std::shared_ptr<const Choice> prev;
};
using ChoicePtr = std::shared_ptr<const Choice>;

struct Entry {
  double t = 0;        // forward + backward of one micro-batch (compute, tensor-group collectives)
  double tb = 0;       // its backward part
  double p = 0;        // trainable parameter bytes
  double a = 0;        // activation bytes per micro-batch
  double buf = 0;      // largest temporary
  double buffers = 0;  // non-trained state bytes
  // Under full recomputation of the unit being built: its activations so far (held while its backward
  // recomputes them: a temporary at the unit's end); 0 otherwise and between units.
  double ua = 0;
  ChoicePtr ch;
};

inline bool dominates(const Entry& x, const Entry& y) {
  return x.t <= y.t && x.tb >= y.tb && x.p <= y.p && x.a <= y.a && x.buf <= y.buf && x.buffers <= y.buffers &&
         x.ua <= y.ua;
}

// Recomputation modes of a unit, as Choice::option values (negative: not a layer option). Inside a unit the mode
// is part of the state (kModeKey), so that entries of different modes never dominate each other there.
constexpr int kRecomputeSelective = -1;
constexpr int kRecomputeFull = -2;

// Keeps at most `cap` of a front sorted by t: the cap / 2 with the least t, and of the others those with the
// least memory (4 p + a + buf + buffers: a pipeline stage holds several micro-batches' activations), so that a
// capped front still holds the plans that fit. Stays sorted by t.
inline void trim(std::vector<Entry>& front, int cap, bool* capped) {
  if (static_cast<int>(front.size()) <= cap) return;
  auto mem = [](const Entry& x) { return 4 * x.p + x.a + x.buf + x.buffers; };
  auto rest = front.begin() + cap / 2;
  std::stable_sort(rest, front.end(), [&](const Entry& a, const Entry& b) { return mem(a) < mem(b); });
  front.resize(static_cast<size_t>(cap));
  std::stable_sort(rest, front.end(), [](const Entry& a, const Entry& b) { return a.t < b.t; });
  *capped = true;
}

// Adds e to the front unless dominated; drops what e dominates. The front may grow to 2 cap before it is
// trimmed (trim(): sorting at every insertion dominated the search time); callers trim to `cap` when done.
// Sorted by t.
// make_ch() gives e its choice record once e is known not to be dominated (most candidates are: allocating
// their records first dominated the layer DP's time).
template <class MakeChoice>
inline void insert(std::vector<Entry>& front, Entry e, int cap, bool* capped, MakeChoice make_ch) {
  // Sorted by t: only entries with t <= e.t can dominate e, only those with t >= e.t can be dominated by it.
  auto by_t = [](const Entry& a, const Entry& b) { return a.t < b.t; };
  auto hi = std::upper_bound(front.begin(), front.end(), e, by_t);
  for (auto it = front.begin(); it != hi; ++it)
    if (dominates(*it, e)) return;
  make_ch(e);
  auto lo = std::lower_bound(front.begin(), front.end(), e, by_t);
  front.erase(std::remove_if(lo, front.end(), [&](const Entry& f) { return dominates(e, f); }), front.end());
  auto at = std::upper_bound(front.begin(), front.end(), e, by_t);
  front.insert(at, std::move(e));
  if (static_cast<int>(front.size()) > 2 * cap) trim(front, cap, capped);
}
inline void insert(std::vector<Entry>& front, Entry e, int cap, bool* capped) {
  insert(front, std::move(e), cap, capped, [](Entry&) {});
}

// A state: the layouts of the live values, each keyed by its producer's position relative to the interval's
// first layer (kOut x offset + output index), sorted. Relative keys make the fronts of translated intervals equal.
using State = std::vector<std::pair<int, int>>;
using Front = std::map<State, std::vector<Entry>>;
constexpr int kOut = 64;
constexpr int kModeKey = -5;  // the state's entry holding the unit's recomputation mode (absent: none)

// ---- the stage intervals of one (micro-batch, tensor group) ---------------------------------------------------
// closed(i, j): the Pareto front of a stage holding units [i, j), every value leaving it made B. Identical
// repeated blocks share one computation: intervals are nodes of a trie keyed by their units' signatures (the
// layers' options and costs, their inputs' positions relative to the layer, their outputs' last use relative
// to it, the pins), so [i, j) and [i', j') with the same sequence of unit signatures share one node, and the
// front of a longer interval extends its prefix's. Choices record layers relative to the interval's start.
class Intervals {
 public:
  // modes[k]: the recomputation modes unit k may take (0 none, kRecomputeSelective, kRecomputeFull), in that order.
  Intervals(const LayerCosts& lc, const std::vector<int>& bounds, const std::vector<int>& last_use,
            const std::map<int, std::vector<int>>& allowed, const std::vector<std::vector<int>>& modes, int cap)
      : lc_(lc), bounds_(bounds), last_use_(last_use), allowed_(allowed), modes_(modes), cap_(cap) {
    int u = static_cast<int>(bounds.size()) - 1;
    for (int k = 0; k < u; ++k)
      in_bytes_.push_back(lc.group_input_bytes(bounds[static_cast<size_t>(k)], bounds[static_cast<size_t>(k) + 1]));
    std::vector<int> sig = unit_signatures(u);
    nodes_.emplace_back();
    nodes_[0].open[State{}].push_back(Entry{});
    node_of_.assign(static_cast<size_t>(u), std::vector<int>(static_cast<size_t>(u) + 1, -1));
    for (int i = 0; i < u; ++i) {
      int node = 0;
      const int start = bounds[static_cast<size_t>(i)];
      for (int j = i + 1; j <= u; ++j) {
        int su = sig[static_cast<size_t>(j) - 1];
        auto it = nodes_[static_cast<size_t>(node)].child.find(su);
        if (it == nodes_[static_cast<size_t>(node)].child.end()) {
          Front f = nodes_[static_cast<size_t>(node)].open;
          f = begin_unit(f, j - 1, start);
          for (int l = bounds[static_cast<size_t>(j) - 1]; l < bounds[static_cast<size_t>(j)]; ++l) f = step(f, l, start);
          f = finish_unit(f);
          Node n;
          n.closed = close(f, start);
          n.open = std::move(f);
          nodes_.push_back(std::move(n));
          int id = static_cast<int>(nodes_.size()) - 1;
          nodes_[static_cast<size_t>(node)].child.emplace(su, id);
          node = id;
        } else {
          node = it->second;
        }
        node_of_[static_cast<size_t>(i)][static_cast<size_t>(j)] = node;
      }
    }
  }
  const std::vector<Entry>& closed(int i, int j) const {
    return nodes_[static_cast<size_t>(node_of_[static_cast<size_t>(i)][static_cast<size_t>(j)])].closed;
  }
  int distinct() const { return static_cast<int>(nodes_.size()) - 1; }
  bool capped = false;

 private:
  struct Node {
    Front open;
    std::vector<Entry> closed;
    std::map<int, int> child;  // unit signature -> node
  };

  // The relative key of value v in an interval starting at layer `start` (-1: made before it, so B).
  int key_of(ValueId v, int start) const {
    const graph::Value& val = lc_.graph().value(v);
    int p = lc_.layer_of(val.producer);
    if (p < start) return -1;
    for (size_t q = 0; q < lc_.node(p).outputs.size(); ++q)
      if (lc_.node(p).outputs[q] == v) return (p - start) * kOut + static_cast<int>(q);
    return -1;
  }
  ValueId value_of(int key, int start) const {
    return lc_.node(start + key / kOut).outputs[static_cast<size_t>(key % kOut)];
  }

  // One id per distinct unit: everything step() and close() read of its layers, positions made relative.
  std::vector<int> unit_signatures(int u) const {
    std::map<std::string, int> ids;
    std::vector<int> out;
    char buf[64];
    auto num = [&](double x) {
      std::snprintf(buf, sizeof buf, "%a,", x);
      return std::string(buf);
    };
    for (int k = 0; k < u; ++k) {
      std::string key;
      for (int l = bounds_[static_cast<size_t>(k)]; l < bounds_[static_cast<size_t>(k) + 1]; ++l) {
        const graph::Node& n = lc_.node(l);
        key += "|" + std::to_string(n.num_data_inputs) + ":";
        for (int q = 0; q < n.num_data_inputs; ++q) {
          ValueId v = n.inputs[static_cast<size_t>(q)];
          int p = lc_.layer_of(lc_.graph().value(v).producer);
          key += p < 0 ? std::string("x,") : std::to_string(l - p) + "/" + std::to_string(key_of(v, p) % kOut) + ",";
          key += num(lc_.value_bytes(v));
        }
        key += "o:";
        for (ValueId v : n.outputs) {
          if (n.outputs.size() >= static_cast<size_t>(kOut)) throw InternalError("a layer with more than 63 outputs");
          int lu = last_use_[v.idx()];
          key += std::to_string(lu < 0 ? -1 : lu - l) + "," + num(lc_.value_bytes(v));
        }
        auto al = allowed_.find(l);
        if (al != allowed_.end())
          for (int a : al->second) key += "a" + std::to_string(a);
        if (l == bounds_[static_cast<size_t>(k)]) {
          key += "m";
          for (int m : modes_[static_cast<size_t>(k)]) key += std::to_string(m) + ",";
          key += num(in_bytes_[static_cast<size_t>(k)]);
        }
        key += lc_.options(l).empty() || !lc_.options(l)[0].cheap ? "" : "c";
        for (const LayerOption& o : lc_.options(l)) {
          key += "[" + o.signature + "," + std::to_string(o.tensor_parallel) + ",";
          for (Layout x : o.in) key += std::to_string(x) + ",";
          for (Layout x : o.out) key += std::to_string(x) + ",";
          for (double x : {o.forward_s, o.backward_s, o.param_bytes, o.buffer_bytes, o.act_bytes, o.workspace_bytes})
            key += num(x);
        }
      }
      out.push_back(ids.emplace(key, static_cast<int>(ids.size())).first->second);
    }
    return out;
  }

  Front step(const Front& in, int l, int start) {
    Front out;
    const graph::Node& n = lc_.node(l);
    const auto& opts = lc_.options(l);
    auto al = allowed_.find(l);
    for (const auto& [state, entries] : in) {
      auto layout_of = [&](ValueId v) {
        int key = key_of(v, start);
        for (const auto& [id, lay] : state)
          if (id == key) return lay;
        return kLayoutB;
      };
      int mode = 0;
      for (const auto& [id, m] : state)
        if (id == kModeKey) mode = m;
      for (size_t k = 0; k < opts.size(); ++k) {
        if (al != allowed_.end() && std::find(al->second.begin(), al->second.end(), static_cast<int>(k)) == al->second.end())
          continue;
        const LayerOption& o = opts[k];
        double f = 0, b = 0, buf = o.workspace_bytes;
        bool ok = true;
        for (int q = 0; q < n.num_data_inputs && ok; ++q) {
          ValueId v = n.inputs[static_cast<size_t>(q)];
          Reshard rs = lc_.reshard(v, layout_of(v), o.in[static_cast<size_t>(q)]);
          ok = rs.feasible();
          f += rs.forward_s;
          b += rs.backward_s;
          buf = std::max(buf, rs.buffer_bytes);
        }
        if (!ok) continue;
        State ns;
        for (const auto& sv : state)
          if (sv.first == kModeKey || last_use_[value_of(sv.first, start).idx()] > l) ns.push_back(sv);
        for (size_t q = 0; q < n.outputs.size(); ++q)
          if (last_use_[n.outputs[q].idx()] > l) ns.emplace_back((l - start) * kOut + static_cast<int>(q), o.out[q]);
        std::sort(ns.begin(), ns.end());
        auto& dst = out[ns];
        for (const Entry& e : entries) {
          Entry x = e;
          x.t += f + b + o.forward_s + o.backward_s;
          x.tb += b + o.backward_s;
          x.p += o.param_bytes;
          x.buf = std::max(x.buf, buf);
          x.buffers += o.buffer_bytes;
          // Recomputed (full: every layer; selective: the cheap ones): not kept, its forward again in the backward.
          if (mode == kRecomputeFull || (mode == kRecomputeSelective && o.cheap)) {
            x.t += f + o.forward_s;
            x.tb += f + o.forward_s;
            if (mode == kRecomputeFull) x.ua += o.act_bytes;
          } else {
            x.a += o.act_bytes;
          }
          insert(dst, std::move(x), cap_, &capped, [&](Entry& y) {
            y.ch = std::make_shared<const Choice>(Choice{l - start, static_cast<int>(k), e.ch});
          });
        }
      }
    }
    for (auto& [state, entries] : out) trim(entries, cap_, &capped);
    return out;
  }

  // The start of unit k: each entry under each mode the unit may take (none; selective where some layer is cheap;
  // full, which keeps the unit's inputs), the mode recorded in the state and the choices.
  Front begin_unit(const Front& in, int k, int start) {
    const auto& modes = modes_[static_cast<size_t>(k)];
    if (modes.size() == 1 && modes[0] == 0) return in;
    bool cheap = false;
    for (int l = bounds_[static_cast<size_t>(k)]; l < bounds_[static_cast<size_t>(k) + 1]; ++l)
      for (const LayerOption& o : lc_.options(l)) cheap |= o.cheap;
    Front out;
    const int first = bounds_[static_cast<size_t>(k)] - start;
    // Selective recomputation of a unit without cheap layers recomputes nothing: it is none (kept once).
    std::vector<int> ms;
    for (int m : modes) {
      int x = m == kRecomputeSelective && !cheap ? 0 : m;
      if (std::find(ms.begin(), ms.end(), x) == ms.end()) ms.push_back(x);
    }
    for (int m : ms) {
      for (const auto& [state, entries] : in) {
        State ns = state;
        if (m != 0) {
          ns.emplace_back(kModeKey, m);
          std::sort(ns.begin(), ns.end());
        }
        auto& dst = out[ns];
        for (const Entry& e : entries) {
          Entry x = e;
          if (m == kRecomputeFull) x.a += in_bytes_[static_cast<size_t>(k)];
          if (m != 0) x.ch = std::make_shared<const Choice>(Choice{first, m, e.ch});
          insert(dst, std::move(x), cap_, &capped);
        }
      }
    }
    for (auto& [state, entries] : out) trim(entries, cap_, &capped);
    return out;
  }

  // The end of a unit: the mode leaves the state; under full recomputation the unit's activations are a temporary.
  Front finish_unit(const Front& in) {
    Front out;
    for (const auto& [state, entries] : in) {
      State ns;
      for (const auto& sv : state)
        if (sv.first != kModeKey) ns.push_back(sv);
      auto& dst = out[ns];
      for (const Entry& e : entries) {
        Entry x = e;
        x.buf = std::max(x.buf, x.ua);
        x.ua = 0;
        insert(dst, std::move(x), cap_, &capped);
      }
    }
    for (auto& [state, entries] : out) trim(entries, cap_, &capped);
    return out;
  }

  std::vector<Entry> close(const Front& f, int start) {
    std::vector<Entry> out;
    for (const auto& [state, entries] : f) {
      double fw = 0, bw = 0, buf = 0;
      for (const auto& [id, lay] : state) {
        Reshard rs = lc_.reshard(value_of(id, start), lay, kLayoutB);
        fw += rs.forward_s;
        bw += rs.backward_s;
        buf = std::max(buf, rs.buffer_bytes);
      }
      for (const Entry& e : entries) {
        Entry x = e;
        x.t += fw + bw;
        x.tb += bw;
        x.buf = std::max(x.buf, buf);
        insert(out, std::move(x), cap_, &capped);
      }
    }
    trim(out, cap_, &capped);
    return out;
  }

  const LayerCosts& lc_;
  const std::vector<int>& bounds_;
  const std::vector<int>& last_use_;
  const std::map<int, std::vector<int>>& allowed_;
  const std::vector<std::vector<int>>& modes_;
  std::vector<double> in_bytes_;
  int cap_;
  std::vector<Node> nodes_;
  std::vector<std::vector<int>> node_of_;
};

}  // namespace braid::planner::search_detail
