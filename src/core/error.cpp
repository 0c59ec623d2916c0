// Formatting of user errors, the did-you-mean helper and the always-on assertion.
#include "core/error.h"

#include <algorithm>

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
// so "dtpye" suggests "dtype".
static size_t edit_distance(const std::string& a, const std::string& b) {
  auto eq = [](char x, char y) { return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y)); };
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (eq(a[i - 1], b[j - 1]) ? 0 : 1)});
      if (i > 1 && j > 1 && eq(a[i - 1], b[j - 2]) && eq(a[i - 2], b[j - 1])) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::string::npos;
  for (const auto& c : candidates) {
    size_t d = edit_distance(word, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  size_t limit = std::max<size_t>(1, std::max(word.size(), best.size()) / 3);
  if (best_d == std::string::npos || best_d > limit) return "";
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
