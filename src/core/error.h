// Errors: user mistakes (UserError, exit status 2, located at file:line:col) and internal invariant
// failures (BRAID_ASSERT, always on, names file:line and the condition). Diagnostics collects every user
// error found in one pass so that they are reported together.
#pragma once
#include <memory>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace braid {

// A source file's path, shared by every location in it: copying one is a reference count, not a string. A 5 MB
// model file has about 700,000 YAML nodes, each with its location; a path copied into each was a third of
// `braid check`'s time there (malloc, page faults).
class SourcePath {
 public:
  SourcePath() = default;
  SourcePath(std::string p) : p_(p.empty() ? nullptr : std::make_shared<const std::string>(std::move(p))) {}
  SourcePath(const char* p) : SourcePath(std::string(p ? p : "")) {}
  const std::string& str() const { return p_ ? *p_ : empty_string(); }
  operator const std::string&() const { return str(); }
  bool empty() const { return !p_ || p_->empty(); }
  const char* c_str() const { return str().c_str(); }
  size_t size() const { return str().size(); }
  friend bool operator==(const SourcePath& a, const SourcePath& b) { return a.str() == b.str(); }
  friend bool operator==(const SourcePath& a, const std::string& b) { return a.str() == b; }
  friend bool operator==(const SourcePath& a, const char* b) { return a.str() == b; }
  friend std::string operator+(const SourcePath& a, const std::string& b) { return a.str() + b; }
  friend std::string operator+(const std::string& a, const SourcePath& b) { return a + b.str(); }
  friend std::string operator+(const SourcePath& a, const char* b) { return a.str() + b; }
  friend std::string operator+(const char* a, const SourcePath& b) { return a + b.str(); }
  friend std::ostream& operator<<(std::ostream& o, const SourcePath& p) { return o << p.str(); }

 private:
  static const std::string& empty_string() {
    static const std::string e;
    return e;
  }
  std::shared_ptr<const std::string> p_;
};

struct SourceLoc {
  SourcePath file;
  int line = 0;  // 1-based; 0 = unknown
  int col = 0;   // 1-based, counting characters
  bool valid() const { return !file.empty(); }
  std::string str() const;  // "file:line:col", "file" or ""
};

struct Diagnostic {
  SourceLoc loc;
  std::string message;
  std::string hint;
  std::string format() const;  // "file:line:col: error: message\n  hint: ..."
};

// A user's mistake (bad file, bad value, missing data). The CLI prints format() and exits with status 2.
class UserError : public std::runtime_error {
 public:
  explicit UserError(std::vector<Diagnostic> diags);
  UserError(SourceLoc loc, const std::string& message, const std::string& hint = "");
  const std::vector<Diagnostic>& diagnostics() const { return diags_; }
  std::string format() const;

 private:
  std::vector<Diagnostic> diags_;
};

// A broken internal invariant: a bug in braid, never the user's fault.
class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

// A failure outside this process, not a bug: a peer process lost or stopped, a wait timed out, another rank
// aborted the job, the rendezvous store unreachable. The CLI prints it and exits with status 1.
class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Collects user errors in one pass; throw_if_any() raises them all at once.
class Diagnostics {
 public:
  void error(const SourceLoc& loc, std::string message, std::string hint = "");
  bool empty() const { return diags_.empty(); }
  size_t size() const { return diags_.size(); }
  // True once error() keeps no more: callers skip building hints (candidate lists, did-you-mean) then, so a
  // file of a hundred thousand mistakes costs what fifty do.
  bool full() const { return diags_.size() >= kMaxErrors; }
  const std::vector<Diagnostic>& all() const { return diags_; }
  void merge(const UserError& e);
  void throw_if_any() const;
  // Stop collecting after this many errors (a file of garbage must not print a million lines).
  static constexpr size_t kMaxErrors = 50;

 private:
  std::vector<Diagnostic> diags_;
};

// The closest candidate by edit distance, or "" if none is close enough to suggest. Close enough: at most a
// third of the longer name's length in edits (at least one). Names longer than kMaxSuggestLength get no
// suggestion and are never suggested, so a hostile name costs time linear in the candidates' total length.
constexpr size_t kMaxSuggestLength = 256;
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);
// "did you mean 'x'?" or "" (convenience for hints).
std::string did_you_mean_hint(const std::string& word, const std::vector<std::string>& candidates);

[[noreturn]] void assert_fail(const char* cond, const char* file, int line, const std::string& msg);

namespace detail {
inline std::string concat() { return {}; }
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace braid

#define BRAID_ASSERT(cond, ...)                                                              \
  do {                                                                                       \
    if (!(cond)) ::braid::assert_fail(#cond, __FILE__, __LINE__, ::braid::detail::concat(__VA_ARGS__)); \
  } while (0)

#define BRAID_STR(...) ::braid::detail::concat(__VA_ARGS__)
