// The checkpoint index: everything braid reads back from a checkpoint except the tensors' bytes (the meta,
// the small state, and for every tensor its name, description, CRC-32 and where its bytes lie), in one
// small binary record of braid's own, stored in the file as the dataset /index and located by the header
// (checkpoint_header.h). From format 2 on, braid reads a checkpoint through its index alone: HDF5 never
// parses a checkpoint's structure in braid, so a crafted file (whose checksums an attacker can recompute)
// meets only this bounded decoder, which is fuzzed (fuzz/checkpoint_fuzz.cpp). The HDF5 structure is kept
// for h5py, h5dump and PyTorch, and its bytes stay covered by the header's checksum. Internal to io/.
//
// Encoding (little-endian): "braid-index\n", u32 version 1, then the fields of Index in order; a string is
// u64 length + bytes, a tensor is u8 group, string name, u8 dtype, u8 rank, i64 dims, u32 crc, u64 piece
// count and (u64 file offset, u64 bytes) per piece, in the tensor's memory order.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "io/checkpoint.h"

namespace braid::io::ckpt_index {

struct FileRange {
  uint64_t offset = 0, bytes = 0;
};

struct TensorEntry {
  int group = 0;     // 0 /params, 1 /buffers, 2 /optimizer, 3 /rng (as for_each_tensor, with streams last)
  std::string rel;   // relative to the group: "fc.weight", "fc.weight/exp_avg", a stream's name
  TensorDesc desc;
  uint32_t crc = 0;  // CRC-32 of the tensor's bytes
  std::vector<FileRange> pieces;  // the bytes in memory order; their sizes add up to desc.bytes()
};

struct Index {
  CheckpointMeta meta;
  std::string optimizer_type;
  int64_t optimizer_steps = 0;
  double loss_scale = 0;  // 0: none (not an fp16 run)
  int64_t loss_scale_growth_tracker = 0;
  DataCursor data;
  std::string plan_text;
  std::vector<TensorEntry> tensors;
};

// The index's bytes.
std::string encode(const Index& index);

// Decodes `bytes`, the index of checkpoint `path` (`file_size` bytes, tensor data after `data_start`),
// trusting nothing: every length, count, dtype, rank and size is checked against what is left of `bytes`
// and of the file, names are checked as the writer checks them, and pieces must lie in the file and add up
// to their tensor. Anything else is a UserError naming `path`; never a crash or an allocation larger than
// `bytes` and the file.
Index decode(const std::string& bytes, const std::string& path, uint64_t file_size, uint64_t data_start);

}  // namespace braid::io::ckpt_index
