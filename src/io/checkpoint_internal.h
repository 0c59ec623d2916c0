// Internals shared by checkpoint.cpp (writing, checksums) and checkpoint_read.cpp (reading); not an API.
// Everything here reports problems as UserErrors naming the checkpoint file.
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace braid::io::ckpt {

// A UserError "checkpoint 'PATH': MSG".
[[noreturn]] void bad_file(const std::string& path, const std::string& msg, const std::string& hint = "");

// CRC-32 of a buffer (io/crc32.h), on several threads when it is large; its text form "crc32:1a2b3c4d".
uint32_t crc32_of(const void* data, size_t n);
std::string checksum_text(uint32_t crc);

// Scalar attributes of `obj` (named `shown` in errors): numbers converted to `mtype`, or strings; a missing
// or mistyped attribute is a UserError naming `path`.
void read_number_attr(hid_t obj, const std::string& path, const std::string& shown, const std::string& key,
                      hid_t mtype, void* out);
int64_t read_i64_attr(hid_t obj, const std::string& path, const std::string& shown, const std::string& key);
std::string read_str_attr(hid_t obj, const std::string& path, const std::string& shown, const std::string& key);

// Whether HDF5's chunk addresses (H5Dget_chunk_info*) are relative to the end of the user block; found out
// once per process with a probe file in the first of `dirs` that takes one; nullopt when none does.
std::optional<bool> chunk_addresses_are_relative(const std::vector<std::string>& dirs);

}  // namespace braid::io::ckpt
