// Token files: read-only maps, the vectorised id scan, and the atomic writer.
#include "io/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>

#include "core/cpu_isa.h"
#include "core/error.h"
#include "core/resource_error.h"

// The ids are used as they lie in the map; a big-endian host would need a byte swap on every read.
static_assert(std::endian::native == std::endian::little, "token files are little endian; this host is not");

namespace braid::io {

std::optional<TokenDType> parse_token_dtype(std::string_view name) {
  if (name == "u16") return TokenDType::u16;
  if (name == "u32") return TokenDType::u32;
  if (name == "i32") return TokenDType::i32;
  return std::nullopt;
}

const char* token_dtype_name(TokenDType t) {
  switch (t) {
    case TokenDType::u16: return "u16";
    case TokenDType::u32: return "u32";
    case TokenDType::i32: return "i32";
  }
  return "?";
}

int64_t token_dtype_size(TokenDType t) { return t == TokenDType::u16 ? 2 : 4; }

int64_t token_dtype_capacity(TokenDType t) {
  switch (t) {
    case TokenDType::u16: return int64_t{1} << 16;
    case TokenDType::u32: return int64_t{1} << 32;
    case TokenDType::i32: return int64_t{1} << 31;
  }
  return 0;
}

TokenDType choose_token_dtype(const std::string& name, int64_t vocab, const std::string& who) {
  TokenDType t = vocab <= token_dtype_capacity(TokenDType::u16) ? TokenDType::u16 : TokenDType::u32;
  if (!name.empty()) {
    auto p = parse_token_dtype(name);
    if (!p) throw UserError(SourceLoc{}, "unknown token dtype '" + name + "'", "choose u16, u32 or i32");
    t = *p;
  }
  if (vocab > token_dtype_capacity(t))
    throw UserError(SourceLoc{}, who + " has a vocabulary of " + std::to_string(vocab) + ", too large for " +
                                     token_dtype_name(t) + " (ids up to " + std::to_string(token_dtype_capacity(t) - 1) + ")",
                    "use --dtype u32 (or leave --dtype out: u16 is chosen only when the ids fit)");
  return t;
}

// ---- reading ------------------------------------------------------------------------------------------------

std::shared_ptr<const TokenFile> TokenFile::open(const std::string& path, TokenDType dtype) {
  const std::string shown = "token file '" + path + "'";
  // Non-blocking, so that a FIFO without a writer cannot hang the open; only regular files are mapped.
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    throw UserError(SourceLoc{}, shown + ": " + (err == ENOENT ? std::string("no such file") : std::strerror(err)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw UserError(SourceLoc{}, shown + " is not a regular file");
  }
  const auto bytes = static_cast<int64_t>(st.st_size);
  const int64_t elem = token_dtype_size(dtype);
  if (bytes % elem != 0) {
    ::close(fd);
    throw UserError(SourceLoc{}, shown + " has " + std::to_string(bytes) + " bytes, not a multiple of " +
                                     std::to_string(elem) + " (the size of " + token_dtype_name(dtype) + ")",
                    "is `dtype` right? nanoGPT's .bin files are u16; u32 or i32 for vocabularies over 65536");
  }
  const void* data = nullptr;
  if (bytes > 0) {
    void* m = ::mmap(nullptr, static_cast<size_t>(bytes), PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      throw UserError(SourceLoc{}, shown + ": cannot map it: " + std::strerror(err));
    }
    data = m;
  }
  ::close(fd);  // the map keeps the file
  return std::shared_ptr<const TokenFile>(
      new TokenFile(path, dtype, data, bytes / elem, static_cast<size_t>(bytes)));
}

TokenFile::~TokenFile() {
  if (mapped_ > 0) ::munmap(const_cast<void*>(data_), mapped_);
}

int64_t TokenFile::at(int64_t i) const {
  BRAID_ASSERT(i >= 0 && i < size_, "token ", i, " outside [0, ", size_, ")");
  switch (dtype_) {
    case TokenDType::u16: return static_cast<const uint16_t*>(data_)[i];
    case TokenDType::u32: return static_cast<const uint32_t*>(data_)[i];
    case TokenDType::i32: return static_cast<const int32_t*>(data_)[i];
  }
  return 0;
}

void TokenFile::advise_sequential(bool sequential) const {
  if (mapped_ > 0) ::madvise(const_cast<void*>(data_), mapped_, sequential ? MADV_SEQUENTIAL : MADV_RANDOM);
}

namespace {

// min/max over v[0, n): independent lanes the compiler vectorises (pminuw/pmaxuw and the like).
template <typename T>
TokenRange range_of(const T* v, int64_t n) {
  T mn = std::numeric_limits<T>::max(), mx = std::numeric_limits<T>::lowest();
  for (int64_t i = 0; i < n; ++i) {
    mn = v[i] < mn ? v[i] : mn;
    mx = v[i] > mx ? v[i] : mx;
  }
  return {static_cast<int64_t>(mn), static_cast<int64_t>(mx)};
}

template <typename T>
TokenRange range_chunked(const T* v, int64_t begin, int64_t end) {
  TokenRange r{std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()};
  constexpr int64_t kChunk = int64_t{1} << 20;  // ids per dispatch: the ISA switch is per chunk, not per id
  for (int64_t b = begin; b < end; b += kChunk) {
    const int64_t n = std::min(kChunk, end - b);
    TokenRange c = cpu_vec([&] { return range_of(v + b, n); });
    r.min = std::min(r.min, c.min);
    r.max = std::max(r.max, c.max);
  }
  return r;
}

}  // namespace

TokenRange token_range(const TokenFile& f, int64_t begin, int64_t end) {
  BRAID_ASSERT(begin >= 0 && begin <= end && end <= f.size(), "token range [", begin, ", ", end, ") of ", f.size());
  if (begin == end) return {};
  switch (f.dtype()) {
    case TokenDType::u16: return range_chunked(static_cast<const uint16_t*>(f.data()), begin, end);
    case TokenDType::u32: return range_chunked(static_cast<const uint32_t*>(f.data()), begin, end);
    case TokenDType::i32: return range_chunked(static_cast<const int32_t*>(f.data()), begin, end);
  }
  return {};
}

int64_t first_token_outside(const TokenFile& f, int64_t begin, int64_t end, int64_t lo, int64_t hi) {
  BRAID_ASSERT(begin >= 0 && begin <= end && end <= f.size(), "token range [", begin, ", ", end, ") of ", f.size());
  for (int64_t i = begin; i < end; ++i) {
    const int64_t v = f.at(i);
    if (v < lo || v >= hi) return i;
  }
  return -1;
}

// ---- writing ------------------------------------------------------------------------------------------------

namespace {

constexpr size_t kWriteBuffer = size_t{4} << 20;

std::string temp_beside(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  std::filesystem::path p(path);
  return (p.parent_path() / ("." + p.filename().string() + ".tmp-" + std::to_string(::getpid()) + "-" +
                             std::to_string(counter.fetch_add(1))))
      .string();
}

int create_temp(const std::string& path, const std::string& tmp) {
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    int err = errno;
    throw_os_error(err, SourceLoc{}, "cannot write '" + path + "': " + std::strerror(err) + " (creating '" + tmp + "')");
  }
  return fd;
}

void write_all(int fd, const char* data, size_t n, const std::string& path) {
  size_t off = 0;
  while (off < n) {
    ssize_t w = ::write(fd, data + off, n - off);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      int err = errno;
      throw_os_error(err, SourceLoc{}, "cannot write '" + path + "': " + std::strerror(err));
    }
    off += static_cast<size_t>(w);
  }
}

// fsync, close (fd becomes -1), rename over `path`, fsync of the folder.
void commit_temp(int& fd, const std::string& tmp, const std::string& path) {
  if (::fsync(fd) != 0) {
    int err = errno;
    throw_os_error(err, SourceLoc{}, "cannot sync '" + path + "': " + std::strerror(err));
  }
  ::close(fd);
  fd = -1;
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    throw_os_error(err, SourceLoc{}, "cannot rename '" + tmp + "' to '" + path + "': " + std::strerror(err));
  }
  std::string dir = std::filesystem::path(path).parent_path().string();
  int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {  // the rename made durable; a folder that cannot be opened for this is no reason to fail
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace

TokenFileWriter::TokenFileWriter(std::string path, TokenDType dtype)
    : path_(std::move(path)), tmp_(temp_beside(path_)), dtype_(dtype) {
  fd_ = create_temp(path_, tmp_);
  buf_.reserve(kWriteBuffer);
}

TokenFileWriter::~TokenFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
}

void TokenFileWriter::append(const int* ids, size_t n) {
  const int64_t cap = token_dtype_capacity(dtype_);
  for (size_t i = 0; i < n; ++i) {
    const int id = ids[i];
    BRAID_ASSERT(id >= 0 && id < cap, "token id ", id, " does not fit ", token_dtype_name(dtype_));
    if (dtype_ == TokenDType::u16) {
      const auto v = static_cast<uint16_t>(id);
      buf_.append(reinterpret_cast<const char*>(&v), sizeof v);
    } else {
      const auto v = static_cast<uint32_t>(id);
      buf_.append(reinterpret_cast<const char*>(&v), sizeof v);
    }
    if (buf_.size() >= kWriteBuffer) flush();
  }
  written_ += static_cast<int64_t>(n);
}

void TokenFileWriter::flush() {
  write_all(fd_, buf_.data(), buf_.size(), path_);
  buf_.clear();
}

void TokenFileWriter::commit() {
  BRAID_ASSERT(!committed_, "token file committed twice");
  flush();
  commit_temp(fd_, tmp_, path_);
  committed_ = true;
}

void write_bytes_atomically(const std::string& path, std::string_view bytes) {
  const std::string tmp = temp_beside(path);
  int fd = create_temp(path, tmp);
  try {
    write_all(fd, bytes.data(), bytes.size(), path);
    commit_temp(fd, tmp, path);
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
}

}  // namespace braid::io
