// Internal to the planner's search (search.cpp): layers grouped into units (one layer, or one instance of a
// repeated block), Pareto fronts of (time, memory) choices, and the stage intervals with their shared fronts.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstring>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/cpu_isa.h"
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
// The choices behind an entry, a chain of records in an arena (Intervals::choice()): plain indices, so that entries
// are copied and moved as plain data (reference counts and an allocation per record dominated the layer DP).
struct Choice {
  int layer, option;  // layer: relative to the first layer of the stage interval it was chosen in
  int prev;           // the previous record, -1: none
};

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
  // The backward's activation gradients beyond the activations kept after them (StagePrediction::
  // grad_transient_bytes): max over the layers so far of grad_bytes less the bytes kept after that layer.
  double e = 0;
  double pm = 0;  // the largest trainable parameter tensor on one device (StagePrediction::gathered_bytes)
  int ch = -1;  // its last choice record, -1: none
};

// Without branches (each comparison's outcome is hard to predict): the same truth value as the && chain.
inline bool dominates(const Entry& x, const Entry& y) {
  return (x.t <= y.t) & (x.tb >= y.tb) & (x.p <= y.p) & (x.a <= y.a) & (x.buf <= y.buf) & (x.buffers <= y.buffers) &
         (x.ua <= y.ua) & (x.e <= y.e) & (x.pm <= y.pm);
}
// dominates(x, y) where x.t <= y.t is known (the layer DP's inner loop): the same truth value. tb first, alone: in
// the fronts sorted by t it rules out about 97% of the pairs the insertion tries (GPT-3 175B on 1,024 A100s), a
// well-predicted branch; the rest with SSE2, two fields per comparison (<= and >= false on NaN alike).
inline bool dominates_rest(const Entry& x, const Entry& y) {
  if (!(x.tb >= y.tb)) return false;
#if defined(__SSE2__)
  static_assert(offsetof(Entry, a) == offsetof(Entry, p) + sizeof(double) &&
                offsetof(Entry, buffers) == offsetof(Entry, buf) + sizeof(double));
  const __m128d pa = _mm_cmple_pd(_mm_loadu_pd(&x.p), _mm_loadu_pd(&y.p));
  const __m128d bb = _mm_cmple_pd(_mm_loadu_pd(&x.buf), _mm_loadu_pd(&y.buf));
  const __m128d tu = _mm_cmple_pd(_mm_set_pd(x.ua, y.tb), _mm_set_pd(y.ua, x.tb));  // y.tb <= x.tb, x.ua <= y.ua
  return (_mm_movemask_pd(_mm_and_pd(_mm_and_pd(pa, bb), tu)) == 3) & (x.e <= y.e) & (x.pm <= y.pm);
#else
  return (x.tb >= y.tb) & (x.p <= y.p) & (x.a <= y.a) & (x.buf <= y.buf) & (x.buffers <= y.buffers) & (x.ua <= y.ua) &
         (x.e <= y.e) & (x.pm <= y.pm);
#endif
}

// ---- the cut DP's cells (search.cpp) ------------------------------------------------------------------------
// Whether some q < n has mt[q] <= x0, st[q] <= x1 and me[q] <= x2 (some_dominates: the cut DP's "some item of
// the cell dominates x"), or x0 <= mt[q], x1 <= st[q] and x2 <= me[q] (dominates_some: "x dominates some item"),
// over the cell's fields packed: W items per step in GCC's vector extensions, no early exit; the same truth value
// as the loop over the items that stops at the first (<= is false on NaN alike, in vectors as in scalars). One
// version per instruction set, chosen once by cpu_isa() (core/cpu_isa.h; not target_clones: GCC lowers a clone's vector
// extensions for the default target, one element at a time).
typedef double V2d __attribute__((vector_size(16)));
typedef long long V2l __attribute__((vector_size(16)));
typedef double V4d __attribute__((vector_size(32)));
typedef long long V4l __attribute__((vector_size(32)));
typedef double V8d __attribute__((vector_size(64)));
typedef long long V8l __attribute__((vector_size(64)));
#define BRAID_LE(u, v) ((u) <= (v))
#define BRAID_GE(u, v) ((v) <= (u))
#define BRAID_ANY_DOMINANCE(VD, VL, W, LE)                                                                  \
  size_t q = 0;                                                                                             \
  VL acc = {};                                                                                              \
  const VD a0 = x0 - VD{}, a1 = x1 - VD{}, a2 = x2 - VD{};                                                  \
  for (; q + (W) <= n; q += (W)) {                                                                          \
    VD b0, b1, b2;                                                                                          \
    std::memcpy(&b0, mt + q, sizeof b0);                                                                    \
    std::memcpy(&b1, st + q, sizeof b1);                                                                    \
    std::memcpy(&b2, me + q, sizeof b2);                                                                    \
    acc |= LE(b0, a0) & LE(b1, a1) & LE(b2, a2);                                                            \
  }                                                                                                         \
  bool any = false;                                                                                         \
  for (int l = 0; l < (W); ++l) any |= acc[l] != 0;                                                         \
  for (; q < n; ++q) any |= LE(mt[q], x0) & LE(st[q], x1) & LE(me[q], x2);                                  \
  return any
#define BRAID_DOMINANCE_FNS(SUFFIX, ATTR, VD, VL, W)                                                          \
  ATTR inline bool some_dominates_##SUFFIX(const double* mt, const double* st, const double* me, size_t n, double x0, \
                                    double x1, double x2) {                                                   \
    BRAID_ANY_DOMINANCE(VD, VL, W, BRAID_LE);                                                                 \
  }                                                                                                           \
  ATTR inline bool dominates_some_##SUFFIX(const double* mt, const double* st, const double* me, size_t n, double x0, \
                                    double x1, double x2) {                                                   \
    BRAID_ANY_DOMINANCE(VD, VL, W, BRAID_GE);                                                                 \
  }
BRAID_DOMINANCE_FNS(base, , V2d, V2l, 2)
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
BRAID_DOMINANCE_FNS(avx2, __attribute__((target("avx2"))), V4d, V4l, 4)
BRAID_DOMINANCE_FNS(avx512, __attribute__((target("avx512f"))), V8d, V8l, 8)
#endif
#undef BRAID_DOMINANCE_FNS
#undef BRAID_ANY_DOMINANCE
#undef BRAID_LE
#undef BRAID_GE
using DominanceFn = bool (*)(const double*, const double*, const double*, size_t, double, double, double);
struct DominanceFns {
  DominanceFn some_dominates, dominates_some;
};
inline const DominanceFns& dominance_fns() {
  static const DominanceFns fns = []() {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
    if (cpu_isa() == CpuIsa::avx512) return DominanceFns{some_dominates_avx512, dominates_some_avx512};
    if (cpu_isa() == CpuIsa::avx2) return DominanceFns{some_dominates_avx2, dominates_some_avx2};
#endif
    return DominanceFns{some_dominates_base, dominates_some_base};
  }();
  return fns;
}

// Recomputation modes of a unit, as Choice::option values (negative: not a layer option). Inside a unit the mode
// is part of the state (kModeKey), so that entries of different modes never dominate each other there.
constexpr int kRecomputeSelective = -1;
constexpr int kRecomputeFull = -2;

// Keeps at most `cap` of a front sorted by t: the cap / 2 with the least t, and of the others those with the
// least memory (4 p + a + buf + buffers: a pipeline stage holds several micro-batches' activations), so that a
// capped front still holds the plans that fit. Not e (the backward's gradients): under full recomputation little is
// kept after a layer, so e stays near the stage's largest gradients, and counting it here trimmed away the fully
// recomputed entries the largest runs need (GPT-3 175B at seq 16384 on 1,024 A100s then found only a plan 53%
// slower than one that fits; docs/planner.md). Stays sorted by t.
// The result of std::stable_sort by memory, resize, std::stable_sort by t of the rest, computed as a selection: the
// kept rest is the cap - cap / 2 least by (memory, position), ordered by (t, memory, position), both total orders.
inline void trim(std::vector<Entry>& front, int cap, bool* capped) {
  if (static_cast<int>(front.size()) <= cap) return;
  auto mem = [](const Entry& x) { return 4 * x.p + x.a + x.buf + x.buffers; };
  struct Key {
    double mem, t;
    size_t at;
  };
  const size_t keep = static_cast<size_t>(cap / 2), want = static_cast<size_t>(cap) - keep;
  thread_local std::vector<Key> keys;
  thread_local std::vector<Entry> kept;
  keys.clear();
  for (size_t q = keep; q < front.size(); ++q) keys.push_back(Key{mem(front[q]), front[q].t, q});
  std::nth_element(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(want), keys.end(), [](const Key& x, const Key& y) {
    return x.mem < y.mem || (!(y.mem < x.mem) && x.at < y.at);
  });
  std::sort(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(want), [](const Key& x, const Key& y) {
    if (x.t < y.t || y.t < x.t) return x.t < y.t;
    if (x.mem < y.mem || y.mem < x.mem) return x.mem < y.mem;
    return x.at < y.at;
  });
  kept.clear();
  for (size_t q = 0; q < want; ++q) kept.push_back(front[keys[q].at]);
  front.resize(static_cast<size_t>(cap));
  std::copy(kept.begin(), kept.end(), front.begin() + static_cast<std::ptrdiff_t>(keep));
  *capped = true;
}

// Adds e to the front unless dominated; drops what e dominates. The front may grow to 2 cap before it is
// trimmed (trim(): sorting at every insertion dominated the search time); callers trim to `cap` when done.
// Sorted by t.
// make_ch() gives e its choice record once e is known not to be dominated (most candidates are: allocating
// their records first dominated the layer DP's time).
// The same as: hi = std::upper_bound by t; e dominated by an entry of [begin, hi): return; lo = std::lower_bound
// by t; std::remove_if over [lo, end) of the entries e dominates; e inserted at std::upper_bound by t. The bounds
// found by the scans the dominance tests make anyway (binary searches were a third of the layer DP's time: their
// branches are unpredictable), the insertion point during the removal (the kept entries of t == e.t stay before
// e). Times are never NaN (sums of non-negative figures, +inf for an infeasible option), so the fronts are
// partitioned by every comparison the searches make and the scans find the same positions.
template <class MakeChoice>
inline void insert(std::vector<Entry>& front, Entry e, int cap, bool* capped, MakeChoice make_ch) {
  // Sorted by t: only entries with t <= e.t can dominate e, only those with t >= e.t can be dominated by it.
  const size_t n = front.size();
  Entry* f = front.data();
  size_t q = 0;
  for (; q < n && f[q].t < e.t; ++q)
    if (dominates_rest(f[q], e)) return;
  const size_t lo = q;
  for (; q < n && !(e.t < f[q].t); ++q)
    if (dominates_rest(f[q], e)) return;
  const size_t hi = q;
  make_ch(e);
  size_t w = lo, at = lo;
  for (size_t r = lo; r < n; ++r) {
    if (r == hi) at = w;
    if (dominates_rest(e, f[r])) continue;
    if (w != r) f[w] = f[r];
    ++w;
  }
  if (hi == n) at = w;
  front.resize(w);
  front.insert(front.begin() + static_cast<std::ptrdiff_t>(at), std::move(e));
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
    // The trie of the intervals' signatures; a node's fronts are computed when first read (closed()), from its
    // parent's open front, by the interval [i, j) that first reached it in the order i, then j (as if every node
    // were computed here in that order: the same fronts).
    nodes_.emplace_back();
    nodes_[0].open[State{}].push_back(Entry{});
    nodes_[0].built = true;
    node_of_.assign(static_cast<size_t>(u), std::vector<int>(static_cast<size_t>(u) + 1, -1));
    for (int i = 0; i < u; ++i) {
      int node = 0;
      for (int j = i + 1; j <= u; ++j) {
        int su = sig[static_cast<size_t>(j) - 1];
        auto it = nodes_[static_cast<size_t>(node)].child.find(su);
        if (it == nodes_[static_cast<size_t>(node)].child.end()) {
          Node n;
          n.parent = node;
          n.start = bounds[static_cast<size_t>(i)];
          n.unit = j - 1;
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
    // least_t_[i][j]: the sum of the cheapest forward + backward of each layer of [i, j), added in the layers'
    // order as step() adds an entry's: no entry of closed(i, j) has a smaller t (its terms are these plus
    // reshards and recomputation, never negative; rounding is monotone).
    std::vector<double> least(static_cast<size_t>(lc.layers()), kInfeasible);
    for (int l = 0; l < lc.layers(); ++l)
      for (const LayerOption& o : lc.options(l)) least[static_cast<size_t>(l)] = std::min(least[static_cast<size_t>(l)], o.forward_s + o.backward_s);
    least_t_.assign(static_cast<size_t>(u), std::vector<double>(static_cast<size_t>(u) + 1, 0));
    for (int i = 0; i < u; ++i) {
      double t = 0;
      for (int j = i + 1; j <= u; ++j) {
        for (int l = bounds[static_cast<size_t>(j) - 1]; l < bounds[static_cast<size_t>(j)]; ++l) t += least[static_cast<size_t>(l)];
        least_t_[static_cast<size_t>(i)][static_cast<size_t>(j)] = t;
      }
    }
  }
  double least_t(int i, int j) const { return least_t_[static_cast<size_t>(i)][static_cast<size_t>(j)]; }
  // The front of units [i, j), computed on first use (with its prefixes).
  const std::vector<Entry>& closed(int i, int j) {
    int id = node_of_[static_cast<size_t>(i)][static_cast<size_t>(j)];
    build(id);
    return nodes_[static_cast<size_t>(id)].closed;
  }
  const Choice& choice(int i) const { return choices_[static_cast<size_t>(i)]; }
  int distinct() const { return static_cast<int>(nodes_.size()) - 1; }
  // The front of [i, j)'s node (identical intervals share one), 0 .. nodes() - 1.
  int node(int i, int j) const { return node_of_[static_cast<size_t>(i)][static_cast<size_t>(j)]; }
  int nodes() const { return static_cast<int>(nodes_.size()); }
  int built() const { return built_; }
  bool capped = false;

 private:
  struct Node {
    Front open;
    std::vector<Entry> closed;
    std::map<int, int> child;  // unit signature -> node
    int parent = -1, start = 0, unit = 0;  // computed from parent's open front and unit `unit`, interval start `start`
    bool built = false;
  };

  void build(int id) {
    if (nodes_[static_cast<size_t>(id)].built) return;
    std::vector<int> chain;  // unbuilt ancestors, id first
    for (int q = id; !nodes_[static_cast<size_t>(q)].built; q = nodes_[static_cast<size_t>(q)].parent) chain.push_back(q);
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      Node& n = nodes_[static_cast<size_t>(*it)];
      const int start = n.start, k = n.unit;
      const int mark = static_cast<int>(choices_.size());
      Front f = begin_unit(nodes_[static_cast<size_t>(n.parent)].open, k, start);
      for (int l = bounds_[static_cast<size_t>(k)]; l < bounds_[static_cast<size_t>(k) + 1]; ++l) f = step(f, l, start);
      f = finish_unit(f);
      n.closed = close(f, start);
      n.open = std::move(f);
      compact(mark, n);
      n.built = true;
      ++built_;
    }
  }

  // Drops the records made since `mark` that no entry of n reaches (those of dominated or trimmed entries),
  // renumbering the others in their order.
  void compact(int mark, Node& n) {
    const size_t m = static_cast<size_t>(mark), size = choices_.size();
    std::vector<int> id(size - m, -1);
    auto reach = [&](int c) {
      if (c >= mark) id[static_cast<size_t>(c) - m] = 0;
    };
    for (auto& [state, entries] : n.open)
      for (const Entry& e : entries) reach(e.ch);
    for (const Entry& e : n.closed) reach(e.ch);
    for (size_t q = size; q-- > m;)
      if (id[q - m] == 0) reach(choices_[q].prev);
    size_t w = m;
    for (size_t q = m; q < size; ++q) {
      if (id[q - m] < 0) continue;
      Choice c = choices_[q];
      if (c.prev >= mark) c.prev = id[static_cast<size_t>(c.prev) - m];
      id[q - m] = static_cast<int>(w);
      choices_[w++] = c;
    }
    choices_.resize(w);
    auto renumber = [&](Entry& e) {
      if (e.ch >= mark) e.ch = id[static_cast<size_t>(e.ch) - m];
    };
    for (auto& [state, entries] : n.open)
      for (Entry& e : entries) renumber(e);
    for (Entry& e : n.closed) renumber(e);
  }

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
          for (double x : {o.forward_s, o.backward_s, o.param_bytes, o.buffer_bytes, o.act_bytes, o.workspace_bytes,
                           o.grad_bytes, o.largest_param_bytes})
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
        // Room for insert()'s most (2 cap + 1 before its trim) at once: no regrowth (allocations were a tenth of
        // the layer DP's time).
        if (dst.capacity() == 0) dst.reserve(static_cast<size_t>(2 * cap_ + 1));
        for (const Entry& e : entries) {
          Entry x = e;
          x.t += f + b + o.forward_s + o.backward_s;
          x.tb += b + o.backward_s;
          x.p += o.param_bytes;
          x.pm = std::max(x.pm, o.largest_param_bytes);
          x.buf = std::max(x.buf, buf);
          x.buffers += o.buffer_bytes;
          // Recomputed (full: every layer; selective: the cheap ones): not kept, its forward again in the backward.
          if (mode == kRecomputeFull || (mode == kRecomputeSelective && o.cheap)) {
            x.t += f + o.forward_s;
            x.tb += f + o.forward_s;
            if (mode == kRecomputeFull) x.ua += o.act_bytes;
            x.e = std::max(x.e, o.grad_bytes);
          } else {
            x.a += o.act_bytes;
            x.e = std::max(x.e - o.act_bytes, o.grad_bytes);
          }
          insert(dst, std::move(x), cap_, &capped, [&](Entry& y) {
            choices_.push_back(Choice{l - start, static_cast<int>(k), e.ch});
            y.ch = static_cast<int>(choices_.size()) - 1;
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
          if (m == kRecomputeFull) {
            x.a += in_bytes_[static_cast<size_t>(k)];
            x.e -= in_bytes_[static_cast<size_t>(k)];
          }
          insert(dst, std::move(x), cap_, &capped, [&](Entry& y) {
            if (m == 0) return;
            choices_.push_back(Choice{first, m, e.ch});
            y.ch = static_cast<int>(choices_.size()) - 1;
          });
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
  const std::map<int, std::vector<int>> allowed_;  // a copy: the fronts are computed after the constructor
  const std::vector<std::vector<int>>& modes_;
  std::vector<double> in_bytes_;
  int cap_;
  std::vector<Node> nodes_;
  std::vector<std::vector<int>> node_of_;
  int built_ = 0;
  std::vector<Choice> choices_;

  std::vector<std::vector<double>> least_t_;
};

}  // namespace braid::planner::search_detail
