// LineTable: line starts and a character count every kStride bytes, both built in one pass.
#include "io/line_table.h"

#include <algorithm>

namespace braid::io {

namespace {
bool is_lead(char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }
}  // namespace

LineTable::LineTable(const std::string& text, const std::string& file) : text_(text), file_(file) {
  starts_.push_back(0);
  chars_.reserve(text.size() / kStride + 1);
  size_t chars = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (i % kStride == 0) chars_.push_back(chars);
    if (text[i] == '\n') starts_.push_back(i + 1);
    chars += is_lead(text[i]);
  }
  if (text.size() % kStride == 0) chars_.push_back(chars);
}

size_t LineTable::chars_before(size_t off) const {
  off = std::min(off, text_.size());
  size_t k = off / kStride;
  size_t n = chars_[k];
  for (size_t i = k * kStride; i < off; ++i) n += is_lead(text_[i]);
  scanned_ += off - k * kStride;
  return n;
}

SourceLoc LineTable::at(int line0, int bytecol0) const {
  scanned_ = 0;
  if (line0 < 0 || bytecol0 < 0) return SourceLoc{file_, 1, 1};
  size_t line = std::min<size_t>(static_cast<size_t>(line0), starts_.size() - 1);
  size_t begin = starts_[line];
  size_t end = std::min(text_.size(), begin + static_cast<size_t>(bytecol0));
  size_t col = chars_before(end) - chars_before(begin) + 1;
  return SourceLoc{file_, static_cast<int>(line) + 1, static_cast<int>(col)};
}

SourceLoc LineTable::at_offset(size_t off) const {
  size_t line = std::upper_bound(starts_.begin(), starts_.end(), off) - starts_.begin() - 1;
  return at(static_cast<int>(line), static_cast<int>(off - starts_[line]));
}

}  // namespace braid::io
