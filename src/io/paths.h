// Path helpers: paths inside a file are relative to that file (MODEL_FORMAT.md).
#pragma once
#include <cstddef>
#include <limits>
#include <string>

namespace braid::io {

// `path` resolved against the folder of `file` (unchanged when absolute or when file is empty).
std::string resolve_relative(const std::string& path, const std::string& file);
bool file_exists(const std::string& path);
// Whole file as bytes; throws UserError naming the path when it cannot be read. Only regular files are read:
// a directory, FIFO, socket or device is refused before a byte is read (the file is opened non-blocking, so a
// FIFO without a writer never blocks), and so is a file of more than max_bytes.
std::string read_file(const std::string& path, size_t max_bytes = std::numeric_limits<size_t>::max());

}  // namespace braid::io
