// The checkpoint header (see checkpoint_header.h). Text, so `head -c 1024 FILE` shows it:
//   braid checkpoint / format 1 / userblock 4096 / size N / metadata-crc32 HEX / ranges K / K lines
//   "OFFSET SIZE" / header-crc32 HEX (of every byte before that line), then zeros up to the user block's end.
// The reader trusts nothing in it until the header's own CRC matches; ranges must be sorted, disjoint and
// inside the file.
#include "io/checkpoint_header.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstring>
#include <sstream>
#include <utility>

#include "core/error.h"
#include "io/crc32.h"

namespace braid::io::ckpt_header {

namespace {

constexpr const char* kMagic = "braid checkpoint\n";
constexpr uint64_t kMaxUserblock = uint64_t{1} << 28;

[[noreturn]] void bad(const std::string& path, const std::string& msg, const std::string& hint = "") {
  throw UserError(SourceLoc{}, "checkpoint '" + path + "': " + msg, hint);
}

const char* kDamaged = "the file was damaged after it was written; resume from an older checkpoint";

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

// Reads exactly n bytes at `offset`; false on a short read or an error (errno set).
bool pread_all(int fd, void* buf, size_t n, uint64_t offset) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
  return true;
}

// CRC-32 of the bytes of [begin, end) outside the sorted, disjoint `raw` ranges.
bool crc_outside(int fd, uint64_t begin, uint64_t end, const std::vector<Range>& raw, uint32_t* out) {
  std::vector<char> buf(size_t{1} << 20);
  uint32_t crc = 0;
  auto feed = [&](uint64_t a, uint64_t b) {
    while (a < b) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(b - a, buf.size()));
      if (!pread_all(fd, buf.data(), n, a)) return false;
      crc = crc32(crc, buf.data(), n);
      a += n;
    }
    return true;
  };
  uint64_t at = begin;
  for (const Range& r : raw) {
    if (!feed(at, r.offset)) return false;
    at = r.offset + r.size;
  }
  if (!feed(at, end)) return false;
  *out = crc;
  return true;
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08" PRIx32, v);
  return buf;
}

}  // namespace

uint64_t reserve_bytes(size_t max_ranges) {
  uint64_t need = 256 + 44 * static_cast<uint64_t>(max_ranges);  // two 20-digit numbers per range line
  uint64_t size = 1024;
  while (size < need) size *= 2;
  return size;
}

void write(const std::string& file, const std::string& shown, int format, std::vector<Range> raw, uint64_t userblock) {
  Fd fd(::open(file.c_str(), O_RDWR | O_CLOEXEC));
  auto fail = [&](const std::string& what) {
    throw UserError(SourceLoc{}, "cannot write checkpoint '" + shown + "': " + what + " of '" + file + "': " +
                                     std::strerror(errno));
  };
  if (fd.get() < 0) fail("cannot reopen the temporary");
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) fail("cannot stat");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  // Sorted and merged: chunks written one after another are usually adjacent.
  std::sort(raw.begin(), raw.end(), [](const Range& a, const Range& b) { return a.offset < b.offset; });
  std::vector<Range> merged;
  for (const Range& r : raw) {
    if (r.size == 0) continue;
    BRAID_ASSERT(r.offset >= userblock && r.offset + r.size <= size, "tensor data outside the file");
    if (!merged.empty() && r.offset <= merged.back().offset + merged.back().size)
      merged.back().size = std::max(merged.back().offset + merged.back().size, r.offset + r.size) - merged.back().offset;
    else merged.push_back(r);
  }
  uint32_t meta_crc = 0;
  if (!crc_outside(fd.get(), userblock, size, merged, &meta_crc)) fail("cannot read back");
  std::string text = std::string(kMagic) + "format " + std::to_string(format) + "\nuserblock " +
                     std::to_string(userblock) + "\nsize " + std::to_string(size) + "\nmetadata-crc32 " +
                     hex32(meta_crc) + "\nranges " + std::to_string(merged.size()) + "\n";
  for (const Range& r : merged) text += std::to_string(r.offset) + " " + std::to_string(r.size) + "\n";
  text += "header-crc32 " + hex32(crc32(0, text.data(), text.size())) + "\n";
  BRAID_ASSERT(text.size() <= userblock, "checkpoint header of ", text.size(), " bytes exceeds its user block");
  text.resize(static_cast<size_t>(userblock), '\0');
  size_t done = 0;
  while (done < text.size()) {
    ssize_t w = ::pwrite(fd.get(), text.data() + done, text.size() - done, static_cast<off_t>(done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail("cannot write the header");
    done += static_cast<size_t>(w);
  }
  if (::close(fd.release()) != 0) fail("cannot close");
}

void verify(const std::string& path, int max_format) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) bad(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) bad(path, std::string("cannot stat: ") + std::strerror(errno));
  const uint64_t actual = static_cast<uint64_t>(st.st_size);
  const size_t magic_len = std::strlen(kMagic);
  std::string head(std::min<uint64_t>(actual, 512), '\0');
  if (!pread_all(fd.get(), head.data(), head.size(), 0)) bad(path, std::string("cannot read: ") + std::strerror(errno));
  if (head.compare(0, magic_len, kMagic) != 0)
    bad(path, "is not a braid checkpoint (its first bytes are not a braid checkpoint header)",
        "braid checkpoints are written by `braid train` with checkpoint.dir set; weights files from --save-init "
        "are read with --init-from");

  // The format first, before the layout of the rest is assumed.
  std::istringstream first(head.substr(magic_len));
  std::string key;
  long long format = 0;
  unsigned long long userblock = 0;
  if (!(first >> key >> format) || key != "format") bad(path, "its header is corrupt (no format line)", kDamaged);
  if (format > max_format)
    bad(path, "written by a newer braid (format " + std::to_string(format) + "; this braid reads format " +
                  std::to_string(max_format) + " and older)",
        "use a newer braid to read it");
  if (!(first >> key >> userblock) || key != "userblock" || userblock < 512 || (userblock & (userblock - 1)) != 0 ||
      userblock > kMaxUserblock)
    bad(path, "its header is corrupt (bad user block size)", kDamaged);
  if (userblock > actual)
    bad(path, "is truncated (" + std::to_string(actual) + " bytes, shorter than its " + std::to_string(userblock) +
                  "-byte header)",
        kDamaged);
  std::string block(static_cast<size_t>(userblock), '\0');
  if (!pread_all(fd.get(), block.data(), block.size(), 0)) bad(path, std::string("cannot read: ") + std::strerror(errno));
  size_t crc_at = block.find("header-crc32 ");
  size_t nul = block.find('\0');
  if (crc_at == std::string::npos || (nul != std::string::npos && nul < crc_at))
    bad(path, "its header is corrupt (no header checksum)", kDamaged);
  std::string stored_crc = block.substr(crc_at + 13, 8);
  if (hex32(crc32(0, block.data(), crc_at)) != stored_crc ||
      block.compare(crc_at + 21, 1, "\n") != 0)
    bad(path, "its header is corrupt (checksum mismatch)", kDamaged);

  // From here on the header is what braid wrote.
  std::istringstream in(block.substr(magic_len, crc_at - magic_len));
  unsigned long long size = 0, count = 0;
  std::string meta_crc;
  in >> key >> format >> key >> userblock >> key >> size >> key >> meta_crc >> key >> count;
  if (!in || count > userblock / 4) bad(path, "its header is corrupt (unreadable)", kDamaged);
  std::vector<Range> raw(static_cast<size_t>(count));
  uint64_t end = userblock;
  for (Range& r : raw) {
    unsigned long long o = 0, n = 0;
    if (!(in >> o >> n) || o < end || n > size || o > size - n) bad(path, "its header is corrupt (bad data ranges)", kDamaged);
    r = Range{o, n};
    end = o + n;
  }
  if (actual < size)
    bad(path, "is truncated (" + std::to_string(actual) + " of the " + std::to_string(size) + " bytes written)", kDamaged);
  if (actual > size)
    bad(path, "has " + std::to_string(actual) + " bytes, " + std::to_string(actual - size) + " more than were written",
        kDamaged);
  uint32_t crc = 0;
  if (!crc_outside(fd.get(), userblock, size, raw, &crc)) bad(path, std::string("cannot read: ") + std::strerror(errno));
  if (hex32(crc) != meta_crc)
    bad(path, "is corrupt: its HDF5 structure (everything but tensor data) fails its checksum (stored crc32:" +
                  meta_crc + ", file crc32:" + hex32(crc) + ")",
        kDamaged);
}

}  // namespace braid::io::ckpt_header
