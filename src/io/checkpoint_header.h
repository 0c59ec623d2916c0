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

// What a verified header says.
struct Header {
  int format = 0;
  uint64_t userblock = 0, size = 0;
  std::vector<Range> raw;  // the tensor data, sorted and disjoint
  // From format 2 on: where the checkpoint index lies (checkpoint_index.h) and its CRC-32.
  bool has_index = false;
  Range index;
  uint32_t index_crc = 0;
};

// Writes the header into the user block (`userblock` bytes) of the closed file `file`, whose tensor data
// lies in `raw` and whose index (when `index.size` > 0) in `index`, of CRC `index_crc`; every other byte
// after the user block is checksummed. Errors name `shown` (the target).
void write(const std::string& file, const std::string& shown, int format, std::vector<Range> raw, uint64_t userblock,
           Range index = {}, uint32_t index_crc = 0);

// Checks the header of `path` (the bytes after its last line must be zeros), the file's size and every byte
// outside the tensor data; a UserError naming `path` (truncated, grown, damaged, not a braid checkpoint, a
// newer format, a format-2 header without an index) on any mismatch. Returns the header.
Header verify(const std::string& path, int max_format);

// For the fuzzer and the tests only: recomputes the checksums of a header that still parses (the header's,
// the metadata's and the index's) so that the file passes verify() whatever else was changed, as an attacker
// could. False, with nothing written, when the header does not parse or names bytes outside the file.
bool reseal(const std::string& path);

}  // namespace braid::io::ckpt_header
