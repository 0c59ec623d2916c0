// Path resolution relative to the referring file, existence checks, whole-file reads (regular files only:
// stat before open, open non-blocking, fstat after, so a FIFO or a device is refused without a read).
#include "io/paths.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace braid::io {

namespace fs = std::filesystem;

std::string resolve_relative(const std::string& path, const std::string& file) {
  if (path.empty() || file.empty() || fs::path(path).is_absolute()) return path;
  fs::path base = fs::path(file).parent_path();
  return (base / path).lexically_normal().string();
}

bool file_exists(const std::string& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec);
}

namespace {

// "a directory", "a FIFO", ...: what a stat mode is when it is not a regular file.
std::string kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO (named pipe)";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "of an unknown kind";
}

[[noreturn]] void refuse(const std::string& path, mode_t m) {
  std::string kind = kind_of(m);
  throw UserError(SourceLoc{path, 0, 0}, "is " + kind + ", not a regular file",
                  "model, run, plan and cluster files are read from regular files");
}

void check_size(const std::string& path, uint64_t size, size_t max_bytes) {
  if (size > max_bytes)
    throw UserError(SourceLoc{path, 0, 0}, "file is too large: " + std::to_string(size) + " bytes (the limit is " +
                                               std::to_string(max_bytes) + ")");
}

struct Fd {
  int fd;
  ~Fd() { ::close(fd); }
};

}  // namespace

std::string read_file(const std::string& path, size_t max_bytes) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    int err = errno;
    throw UserError(SourceLoc{path, 0, 0}, err == ENOENT ? "no such file" : std::string("cannot open: ") + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) refuse(path, st.st_mode);
  check_size(path, static_cast<uint64_t>(st.st_size), max_bytes);
  // Opened non-blocking so that a FIFO swapped in after the stat cannot block; fstat checks what was opened.
  Fd f{::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY)};
  if (f.fd < 0) {
    int err = errno;
    throw UserError(SourceLoc{path, 0, 0}, std::string("cannot open file for reading: ") + std::strerror(err));
  }
  if (::fstat(f.fd, &st) != 0) throw UserError(SourceLoc{path, 0, 0}, "cannot open file for reading");
  if (!S_ISREG(st.st_mode)) refuse(path, st.st_mode);
  check_size(path, static_cast<uint64_t>(st.st_size), max_bytes);
  std::string out;
  out.reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  while (true) {
    ssize_t r = ::read(f.fd, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int err = errno;
      throw UserError(SourceLoc{path, 0, 0}, std::string("cannot read: ") + std::strerror(err));
    }
    if (r == 0) break;
    check_size(path, static_cast<uint64_t>(out.size()) + static_cast<uint64_t>(r), max_bytes);  // it grew
    out.append(buf, static_cast<size_t>(r));
  }
  return out;
}

}  // namespace braid::io
