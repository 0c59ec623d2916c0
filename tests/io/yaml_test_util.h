// Helpers shared by the io tests: temporary folders and files (removed afterwards), and lookups of
// diagnostics by exact line:col and message fragment.
#pragma once
// (YAML-side helpers; the data-side helpers are in io_test_util.h)
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "temp_dir.h"

namespace braid::io::iotest {

using ::braid::testing::TempDir;  // tests/temp_dir.h

inline std::string dump(const std::vector<Diagnostic>& diags) {
  std::string out;
  for (const auto& d : diags) out += d.format() + "\n";
  return out.empty() ? "(no diagnostics)\n" : out;
}
inline std::string dump(const Diagnostics& d) { return dump(d.all()); }

// True when some diagnostic sits at line:col and its message or hint holds `fragment`.
inline bool has_diag(const std::vector<Diagnostic>& diags, int line, int col, const std::string& fragment) {
  for (const auto& d : diags)
    if (d.loc.line == line && d.loc.col == col &&
        (d.message.find(fragment) != std::string::npos || d.hint.find(fragment) != std::string::npos))
      return true;
  return false;
}
inline bool has_diag(const Diagnostics& d, int line, int col, const std::string& fragment) {
  return has_diag(d.all(), line, col, fragment);
}

#define EXPECT_DIAG(diags, line, col, fragment) \
  EXPECT_TRUE(::braid::io::iotest::has_diag(diags, line, col, fragment)) << ::braid::io::iotest::dump(diags)

}  // namespace braid::io::iotest
