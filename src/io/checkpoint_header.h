// The first bytes of a checkpoint file: a text header in the HDF5 user block (which HDF5, h5py and h5dump
// skip) that lets braid check a file before HDF5 parses it. HDF5 does not survive arbitrary damage to its
// own structures (a flipped byte in a heap or an index can crash the library), so the header holds the
// file's size, where the tensor data lies, and the CRC-32 of every other byte. Tensor data is checked per
// tensor after HDF5 has read it (its `checksum` attribute), which names the damaged tensor.
// Internal to checkpoint.cpp.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace braid::io::ckpt_header {

struct Range {
  uint64_t offset = 0, size = 0;  // bytes of one chunk (or contiguous dataset) of tensor data
};

// The user block to reserve for a file with at most `max_ranges` tensor data ranges: a power of 2, >= 1 KiB.
uint64_t reserve_bytes(size_t max_ranges);

// Writes the header into the user block (`userblock` bytes) of the closed file `file`, whose tensor data
// lies in `raw`; every other byte after the user block is checksummed. Errors name `shown` (the target).
void write(const std::string& file, const std::string& shown, int format, std::vector<Range> raw, uint64_t userblock);

// Checks the header of `path`, the file's size and every byte outside the tensor data; a UserError naming
// `path` (truncated, grown, damaged, not a braid checkpoint, a newer format) on any mismatch.
void verify(const std::string& path, int max_format);

}  // namespace braid::io::ckpt_header
