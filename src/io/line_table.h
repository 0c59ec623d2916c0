// Source positions for the YAML reader: byte offsets and 0-based (line, byte column) marks turned into
// 1-based (line, character column). Each lookup costs O(log lines + kStride), whatever the line length:
// a character count is kept every kStride bytes, so a 16 MiB file on one line costs no more per node than a
// short one (issue 24: counting from the line start made such a file quadratic). Holds references only.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "core/error.h"

namespace braid::io {

class LineTable {
 public:
  static constexpr size_t kStride = 64;  // bytes between stored character counts

  LineTable(const std::string& text, const std::string& file);
  SourceLoc at(int line0, int bytecol0) const;
  SourceLoc at_offset(size_t off) const;
  // A 0-based line and character column, as libyaml's marks count them.
  SourceLoc at_char(size_t line0, size_t charcol0) const {
    return SourceLoc{file_, static_cast<int>(line0) + 1, static_cast<int>(charcol0) + 1};
  }
  // Bytes the last lookup examined one by one (at most 2 * kStride): lets tests check the cost per lookup.
  size_t last_scanned() const { return scanned_; }

 private:
  size_t chars_before(size_t off) const;  // characters (UTF-8 lead bytes) in text_[0, off)

  const std::string& text_;
  SourcePath file_;  // once: every location copies it (a reference count)
  std::vector<size_t> starts_;  // byte offset of each line start
  std::vector<size_t> chars_;   // chars_[k]: characters before byte k * kStride
  mutable size_t scanned_ = 0;
};

}  // namespace braid::io
