// The search's cut DP (search.cpp): an item is a way to cover the first units with some stages, Pareto on
// (max stage time, sum of stage times, max tail); a cell holds the items of one (stages, units) pair, with their
// three objective fields packed for the vectorised dominance scans of search_intervals.h.
#pragma once
#include <algorithm>
#include <cstddef>
#include <limits>
#include <vector>

#include "planner/search_intervals.h"

namespace braid::planner::search_detail {

struct CutItem {
  double max_t, sum_t, max_e;
  int prev_i, prev_idx;  // the previous cell (unit, index in its list), -1 at the start
  const Entry* e;
};

// A cut-DP cell: its items, and their three objective fields packed for the dominance scans (equal to the items'),
// padded with NaN to a multiple of 8 items (a comparison with NaN is false: padding dominates nothing and is
// dominated by nothing), so that the scans have no scalar remainder.
struct Cell {
  std::vector<CutItem> items;
  std::vector<double> mt, st, me;
  bool empty() const { return items.empty(); }
  size_t size() const { return items.size(); }
  const CutItem& operator[](size_t q) const { return items[q]; }
  static size_t padded(size_t n) { return (n + 7) / 8 * 8; }
  void pad() {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const size_t n = items.size(), p = padded(n);
    for (auto* v : {&mt, &st, &me}) {
      v->resize(p, nan);
      std::fill(v->begin() + static_cast<std::ptrdiff_t>(n), v->end(), nan);
    }
  }
  void push_back(const CutItem& x) {
    items.push_back(x);
    const size_t q = items.size() - 1;
    if (mt.size() < items.size()) pad();
    mt[q] = x.max_t;
    st[q] = x.sum_t;
    me[q] = x.max_e;
  }
  // Whether an item dominates x ((x.max_t, x.sum_t, x.max_e) no smaller in each).
  bool dominated(const CutItem& x) const {
    return search_detail::dominance_fns().some_dominates(mt.data(), st.data(), me.data(), mt.size(), x.max_t, x.sum_t,
                                                         x.max_e);
  }
  // Drops the items x dominates, keeping the others in their order (std::remove_if).
  void drop_dominated_by(const CutItem& x) {
    if (!search_detail::dominance_fns().dominates_some(mt.data(), st.data(), me.data(), mt.size(), x.max_t, x.sum_t,
                                                       x.max_e))
      return;
    size_t w = 0;
    for (size_t q = 0; q < items.size(); ++q) {
      if ((x.max_t <= mt[q]) & (x.sum_t <= st[q]) & (x.max_e <= me[q])) continue;
      items[w] = items[q];
      mt[w] = mt[q];
      st[w] = st[q];
      me[w] = me[q];
      ++w;
    }
    items.resize(w);
    pad();
  }
  // After items changed (the cap's truncation): the packed fields again.
  void repack() {
    pad();
    for (size_t q = 0; q < items.size(); ++q) mt[q] = items[q].max_t, st[q] = items[q].sum_t, me[q] = items[q].max_e;
  }
};

}  // namespace braid::planner::search_detail
