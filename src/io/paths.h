// Path helpers: paths inside a file are relative to that file (MODEL_FORMAT.md).
#pragma once
#include <string>

namespace braid::io {

// `path` resolved against the folder of `file` (unchanged when absolute or when file is empty).
std::string resolve_relative(const std::string& path, const std::string& file);
bool file_exists(const std::string& path);
// Whole file as bytes; throws UserError naming the path when it cannot be read.
std::string read_file(const std::string& path);

}  // namespace braid::io
