// Formatting of user errors, the did-you-mean helper and the always-on assertion.
#include "core/error.h"

#include <algorithm>
#include <cctype>

namespace braid {

std::string SourceLoc::str() const {
  if (file.empty()) return "";
  if (line <= 0) return file;
  return file + ":" + std::to_string(line) + ":" + std::to_string(col > 0 ? col : 1);
}

std::string Diagnostic::format() const {
  std::string out;
  if (loc.valid()) out += loc.str() + ": ";
  out += "error: " + message;
  if (!hint.empty()) out += "\n  hint: " + hint;
  return out;
}

static std::string join_diags(const std::vector<Diagnostic>& d) {
  std::string out;
  for (size_t i = 0; i < d.size(); ++i) {
    if (i) out += "\n";
    out += d[i].format();
  }
  return out;
}

UserError::UserError(std::vector<Diagnostic> diags)
    : std::runtime_error(join_diags(diags)), diags_(std::move(diags)) {}

UserError::UserError(SourceLoc loc, const std::string& message, const std::string& hint)
    : UserError(std::vector<Diagnostic>{Diagnostic{std::move(loc), message, hint}}) {}

std::string UserError::format() const { return join_diags(diags_); }

void Diagnostics::error(const SourceLoc& loc, std::string message, std::string hint) {
  if (diags_.size() >= kMaxErrors) return;
  for (const auto& d : diags_)  // the same mistake reached twice (e.g. through two block copies)
    if (d.loc.str() == loc.str() && d.message == message) return;
  diags_.push_back(Diagnostic{loc, std::move(message), std::move(hint)});
}

void Diagnostics::merge(const UserError& e) {
  for (const auto& d : e.diagnostics()) error(d.loc, d.message, d.hint);
}

void Diagnostics::throw_if_any() const {
  if (!diags_.empty()) throw UserError(diags_);
}

// Damerau-Levenshtein (optimal string alignment), case-insensitive: a swap of two neighbours is one edit,
// so "dtpye" suggests "dtype". Only the band |i - j| <= bound of the table is computed (a cell outside it
// costs more than `bound` edits), three rows of it at a time: O(len * bound) time, O(len) memory, and it
// stops once a whole row exceeds the bound. Returns the distance, or bound + 1 for anything over it.
static size_t edit_distance_within(const std::string& a, const std::string& b, size_t bound) {
  auto eq = [](char x, char y) {
    return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
  };
  const size_t n = a.size(), m = b.size(), over = bound + 1;
  if ((n > m ? n - m : m - n) > bound) return over;
  // Rows i-2, i-1 and i of the table; cells outside the band hold `over`.
  std::vector<size_t> r2(m + 1, over), r1(m + 1, over), r0(m + 1, over);
  for (size_t j = 0; j <= std::min(m, bound); ++j) r1[j] = j;
  for (size_t i = 1; i <= n; ++i) {
    const size_t lo = i > bound ? i - bound : 0, hi = std::min(m, i + bound);
    if (lo > 0) r0[lo - 1] = over;  // the cell left of the band (r0 held row i-3 there)
    size_t row_min = over;
    for (size_t j = lo; j <= hi; ++j) {
      size_t d;
      if (j == 0) {
        d = i;
      } else {
        d = std::min({r1[j] + 1, r0[j - 1] + 1, r1[j - 1] + (eq(a[i - 1], b[j - 1]) ? 0 : 1)});
        if (i > 1 && j > 1 && eq(a[i - 1], b[j - 2]) && eq(a[i - 2], b[j - 1])) d = std::min(d, r2[j - 2] + 1);
      }
      r0[j] = std::min(d, over);
      row_min = std::min(row_min, r0[j]);
    }
    if (hi < m) r0[hi + 1] = over;  // the cell right of the band, read by the next row
    if (row_min > bound) return over;
    std::swap(r2, r1);
    std::swap(r1, r0);
  }
  return r1[m];
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  if (word.size() > kMaxSuggestLength) return "";
  std::string best;
  size_t best_d = std::string::npos;
  for (const auto& c : candidates) {
    if (best_d == 0) break;
    if (c.size() > kMaxSuggestLength) continue;
    size_t limit = std::max<size_t>(1, std::max(word.size(), c.size()) / 3);
    // Only a strictly closer candidate replaces the best one, so the first of equals wins.
    size_t bound = best_d == std::string::npos ? limit : std::min(limit, best_d - 1);
    size_t d = edit_distance_within(word, c, bound);
    if (d <= bound) {
      best_d = d;
      best = c;
    }
  }
  return best;
}

std::string did_you_mean_hint(const std::string& word, const std::vector<std::string>& candidates) {
  std::string m = did_you_mean(word, candidates);
  return m.empty() ? "" : "did you mean '" + m + "'?";
}

void assert_fail(const char* cond, const char* file, int line, const std::string& msg) {
  std::string s = std::string("internal error at ") + file + ":" + std::to_string(line) +
                  ": assertion failed: " + cond;
  if (!msg.empty()) s += ": " + msg;
  throw InternalError(s);
}

}  // namespace braid
