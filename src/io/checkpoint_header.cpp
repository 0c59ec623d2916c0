// The checkpoint header (see checkpoint_header.h). Text, so `head -c 1024 FILE` shows it:
//   braid checkpoint / format 2 / userblock 4096 / size N / metadata-crc32 HEX / ranges K / K lines
//   "OFFSET SIZE" / index OFFSET SIZE HEX (format 2 on) / header-crc32 HEX (of every byte before that line),
//   then zeros up to the user block's end.
// The reader trusts nothing in it until the header's own CRC matches; ranges must be sorted, disjoint and
// inside the file.
#include "io/checkpoint_header.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <utility>

#include "core/error.h"
#include "core/resource_error.h"
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

// The header text for `h` (every line up to and including "header-crc32"), its metadata CRC `meta_crc`.
std::string header_text(const Header& h, uint32_t meta_crc) {
  std::string text = std::string(kMagic) + "format " + std::to_string(h.format) + "\nuserblock " +
                     std::to_string(h.userblock) + "\nsize " + std::to_string(h.size) + "\nmetadata-crc32 " +
                     hex32(meta_crc) + "\nranges " + std::to_string(h.raw.size()) + "\n";
  for (const Range& r : h.raw) text += std::to_string(r.offset) + " " + std::to_string(r.size) + "\n";
  if (h.has_index)
    text += "index " + std::to_string(h.index.offset) + " " + std::to_string(h.index.size) + " " + hex32(h.index_crc) + "\n";
  text += "header-crc32 " + hex32(crc32(0, text.data(), text.size())) + "\n";
  return text;
}

// Writes `text`, zero-padded to `userblock` bytes, at the start of `fd`.
bool write_block(int fd, std::string text, uint64_t userblock) {
  text.resize(static_cast<size_t>(userblock), '\0');
  size_t done = 0;
  while (done < text.size()) {
    ssize_t w = ::pwrite(fd, text.data() + done, text.size() - done, static_cast<off_t>(done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    done += static_cast<size_t>(w);
  }
  return true;
}

// The fields of a header block whose own checksum is not yet trusted: the lines between the magic and
// "header-crc32" (`body`). False when they do not parse as a header: unknown or missing fields, ranges that
// are not sorted, disjoint and inside `size`, an index outside the file or inside a range.
bool parse_body(const std::string& body, Header* h, std::string* meta_crc) {
  std::istringstream in(body);
  std::string key[5];
  long long format = 0;
  unsigned long long userblock = 0, size = 0, count = 0;
  in >> key[0] >> format >> key[1] >> userblock >> key[2] >> size >> key[3] >> *meta_crc >> key[4] >> count;
  if (!in || key[0] != "format" || key[1] != "userblock" || key[2] != "size" || key[3] != "metadata-crc32" ||
      key[4] != "ranges" || format < 1 || format > 1000 || userblock < 512 || (userblock & (userblock - 1)) != 0 ||
      userblock > kMaxUserblock || size < userblock || count > body.size() / 4 || meta_crc->size() != 8)
    return false;
  h->format = static_cast<int>(format);
  h->userblock = userblock;
  h->size = size;
  h->raw.assign(static_cast<size_t>(count), Range{});
  uint64_t end = userblock;
  for (Range& r : h->raw) {
    unsigned long long o = 0, n = 0;
    if (!(in >> o >> n) || o < end || n > size || o > size - n) return false;
    r = Range{o, n};
    end = o + n;
  }
  std::string word;
  if (in >> word) {
    unsigned long long o = 0, n = 0;
    std::string crc;
    if (word != "index" || !(in >> o >> n >> crc) || crc.size() != 8 ||
        crc.find_first_not_of("0123456789abcdef") != std::string::npos || o < userblock || n == 0 || n > size ||
        o > size - n)
      return false;
    for (const Range& r : h->raw)
      if (o < r.offset + r.size && r.offset < o + n) return false;
    h->has_index = true;
    h->index = Range{o, n};
    h->index_crc = static_cast<uint32_t>(std::strtoul(crc.c_str(), nullptr, 16));
    if (in >> word) return false;
  }
  return true;
}

}  // namespace

uint64_t reserve_bytes(size_t max_ranges) {
  uint64_t need = 256 + 44 * static_cast<uint64_t>(max_ranges);  // two 20-digit numbers per range line
  uint64_t size = 1024;
  while (size < need) size *= 2;
  return size;
}

void write(const std::string& file, const std::string& shown, int format, std::vector<Range> raw, uint64_t userblock,
           Range index, uint32_t index_crc) {
  Fd fd(::open(file.c_str(), O_RDWR | O_CLOEXEC));
  auto fail = [&](const std::string& what) {
    throw_os_error(errno, SourceLoc{},
                   "cannot write checkpoint '" + shown + "': " + what + " of '" + file + "': " + std::strerror(errno));
  };
  if (fd.get() < 0) fail("cannot reopen the temporary");
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) fail("cannot stat");
  Header h;
  h.format = format;
  h.userblock = userblock;
  h.size = static_cast<uint64_t>(st.st_size);
  // Sorted and merged: chunks written one after another are usually adjacent.
  std::sort(raw.begin(), raw.end(), [](const Range& a, const Range& b) { return a.offset < b.offset; });
  for (const Range& r : raw) {
    if (r.size == 0) continue;
    BRAID_ASSERT(r.offset >= userblock && r.offset + r.size <= h.size, "tensor data outside the file");
    if (!h.raw.empty() && r.offset <= h.raw.back().offset + h.raw.back().size)
      h.raw.back().size = std::max(h.raw.back().offset + h.raw.back().size, r.offset + r.size) - h.raw.back().offset;
    else h.raw.push_back(r);
  }
  if (index.size > 0) {
    BRAID_ASSERT(index.offset >= userblock && index.offset + index.size <= h.size, "checkpoint index outside the file");
    h.has_index = true;
    h.index = index;
    h.index_crc = index_crc;
  }
  uint32_t meta_crc = 0;
  if (!crc_outside(fd.get(), userblock, h.size, h.raw, &meta_crc)) fail("cannot read back");
  std::string text = header_text(h, meta_crc);
  BRAID_ASSERT(text.size() <= userblock, "checkpoint header of ", text.size(), " bytes exceeds its user block");
  if (!write_block(fd.get(), std::move(text), userblock)) fail("cannot write the header");
  if (::close(fd.release()) != 0) fail("cannot close");
}

Header verify(const std::string& path, int max_format) {
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
  if (hex32(crc32(0, block.data(), crc_at)) != stored_crc || block.compare(crc_at + 21, 1, "\n") != 0)
    bad(path, "its header is corrupt (checksum mismatch)", kDamaged);
  // The rest of the user block is zeros: no byte of the file goes unchecked.
  for (size_t i = crc_at + 22; i < block.size(); ++i)
    if (block[i] != '\0') bad(path, "its header is corrupt (byte " + std::to_string(i) + " after it is not zero)", kDamaged);

  // From here on the header is what braid wrote.
  Header h;
  std::string meta_crc;
  if (!parse_body(block.substr(magic_len, crc_at - magic_len), &h, &meta_crc) || h.userblock != userblock)
    bad(path, "its header is corrupt (unreadable)", kDamaged);
  if (h.format >= 2 && !h.has_index) bad(path, "its header is corrupt (a format-2 header without an index)", kDamaged);
  if (actual < h.size)
    bad(path, "is truncated (" + std::to_string(actual) + " of the " + std::to_string(h.size) + " bytes written)", kDamaged);
  if (actual > h.size)
    bad(path, "has " + std::to_string(actual) + " bytes, " + std::to_string(actual - h.size) + " more than were written",
        kDamaged);
  uint32_t crc = 0;
  if (!crc_outside(fd.get(), h.userblock, h.size, h.raw, &crc)) bad(path, std::string("cannot read: ") + std::strerror(errno));
  if (hex32(crc) != meta_crc)
    bad(path, "is corrupt: its HDF5 structure (everything but tensor data) fails its checksum (stored crc32:" +
                  meta_crc + ", file crc32:" + hex32(crc) + ")",
        kDamaged);
  return h;
}

bool reseal(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
  struct stat st {};
  if (fd.get() < 0 || ::fstat(fd.get(), &st) != 0) return false;
  const uint64_t actual = static_cast<uint64_t>(st.st_size);
  std::string head(std::min<uint64_t>(actual, kMaxUserblock), '\0');
  if (!pread_all(fd.get(), head.data(), head.size(), 0)) return false;
  const size_t magic_len = std::strlen(kMagic);
  size_t crc_at = head.find("header-crc32 ");
  if (head.compare(0, magic_len, kMagic) != 0 || crc_at == std::string::npos) return false;
  Header h;
  std::string meta_crc;
  if (!parse_body(head.substr(magic_len, crc_at - magic_len), &h, &meta_crc) || h.size > actual) return false;
  uint32_t crc = 0;
  if (!crc_outside(fd.get(), h.userblock, h.size, h.raw, &crc)) return false;
  if (h.has_index) {
    std::string bytes(static_cast<size_t>(h.index.size), '\0');
    if (!pread_all(fd.get(), bytes.data(), bytes.size(), h.index.offset)) return false;
    h.index_crc = crc32(0, bytes.data(), bytes.size());
  }
  std::string text = header_text(h, crc);
  return text.size() <= h.userblock && write_block(fd.get(), std::move(text), h.userblock);
}

}  // namespace braid::io::ckpt_header
