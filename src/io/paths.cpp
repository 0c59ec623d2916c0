// Path resolution relative to the referring file, existence checks, whole-file reads.
#include "io/paths.h"

#include <filesystem>
#include <fstream>
#include <sstream>

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

std::string read_file(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw UserError(SourceLoc{path, 0, 0}, "is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError(SourceLoc{path, 0, 0}, "cannot open file for reading");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace braid::io
