// A small HDF5 tensor-file API for checkpoints and the PyTorch reference tests. Tensors live at the
// absolute HDF5 paths the caller names ("/params/fc.weight"); intermediate groups are created. Writes are
// atomic: a temporary file in the same folder is written, fsynced and renamed over the target, so a
// failed write leaves any previous file intact. Every failure is a UserError naming the file and dataset.
// Deliberately not here: compression, appending to an existing file, string or compound datasets.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace braid::io {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Writes `tensors` (f32, f64, i32 or i64; stored little-endian, chunked, uncompressed) at their HDF5 paths
// and `string_attrs` as UTF-8 string attributes of the root group. Replaces `path` atomically.
void write_tensors(const std::string& path, const NamedTensors& tensors,
                   const std::map<std::string, std::string>& string_attrs = {});

// Every dataset under `group` ("/" for all), recursively, named relative to the group ("fc.weight",
// "h.0/attn.in_proj_weight"), in name order. Integer datasets of up to 32 bits read as i32, wider as i64;
// floats as f32 or f64.
NamedTensors read_tensors(const std::string& path, const std::string& group);

// One dataset by its absolute path ("/params/fc.weight").
Tensor read_tensor(const std::string& path, const std::string& dataset);

// The block [start, start + count) of a dataset (one entry per axis): how a shard loads its slice of a
// logical tensor without reading the rest.
Tensor read_tensor_slice(const std::string& path, const std::string& dataset, const std::vector<int64_t>& start,
                         const std::vector<int64_t>& count);

// Names (relative to `group`) and descriptions of the datasets under `group`, without reading their data.
std::vector<std::pair<std::string, TensorDesc>> list_tensors(const std::string& path, const std::string& group);

// The scalar string attributes of the root group (variable or fixed length); other attributes are skipped.
std::map<std::string, std::string> read_string_attrs(const std::string& path);

}  // namespace braid::io
