// Training checkpoints as HDF5 files (layout: docs/checkpoints.md): whole (logical) tensors in PyTorch's
// shapes, optimizer state, random streams, the data cursor and the run that made them. Writes are atomic
// (a failure leaves the previous file intact); every tensor carries a CRC-32 of its bytes, and /meta one of
// everything else, checked on read, so flipped bytes are an error naming the file (and the tensor), never
// silently loaded. Not here: matching a checkpoint to a model beyond names and descriptions (the trainer).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "io/h5file.h"

namespace braid::io {

// The layout version this braid writes. A reader refuses files of a newer version.
inline constexpr int kCheckpointFormat = 2;

struct CheckpointMeta {
  int format_version = kCheckpointFormat;
  std::string braid_version = "0.1.0";
  int64_t step = 0, epoch = 0, samples_seen = 0;
  double wall_time_s = 0;  // training time so far (seconds), across resumes
  std::string created;     // ISO 8601 UTC ("2024-05-01T12:00:00Z"); filled in at write when empty
  std::string run_path, model_path, run_text, model_text;
  std::string run_hash, model_hash;  // text_hash() of the texts; filled in at write when empty
};

// /optimizer/<param>/<state>, e.g. exp_avg, exp_avg_sq, momentum_buffer.
struct OptimizerEntry {
  std::string param, state;
  Tensor value;
};
// /rng/<name>: i64[2] holding the key and counter bit-cast from u64.
struct RngStream {
  std::string name;
  uint64_t key = 0, counter = 0;
};
// /data: where the sampler stands (attributes epoch, position, seed).
struct DataCursor {
  int64_t epoch = 0, position = 0;
  uint64_t seed = 0;
};

struct Checkpoint {
  CheckpointMeta meta;
  NamedTensors params;   // "fc.weight" -> the whole tensor in PyTorch's shape; stored at /params/fc.weight
  NamedTensors buffers;  // "bn1.running_mean", "bn1.num_batches_tracked" -> /buffers/...
  std::vector<OptimizerEntry> optimizer;
  int64_t optimizer_steps = 0;  // attribute `step` of /optimizer: optimizer steps taken
  std::string optimizer_type;   // attribute `type` of /optimizer: "sgd", "adamw" ("" when none)
  // Attributes `loss_scale` and `loss_scale_growth_tracker` of /optimizer, only in fp16 runs (dynamic loss
  // scaling, exec/loss_scale.h); 0 and 0 (and absent from the file) otherwise.
  double loss_scale = 0;
  int64_t loss_scale_growth_tracker = 0;
  std::vector<RngStream> rng;
  DataCursor data;
  std::string plan_text;  // /plan: the plan in force (informational)
};

// Every tensor of `c` with its path in the file, in file order: fn("/params/<name>", t, 0), then the buffers'
// ("/buffers/<name>", 1) and the optimizer state's ("/optimizer/<param>/<state>", 2). Random streams are not
// tensors here.
template <typename F>
void for_each_tensor(const Checkpoint& c, F&& fn) {
  for (const auto& [n, t] : c.params) fn("/params/" + n, t, 0);
  for (const auto& [n, t] : c.buffers) fn("/buffers/" + n, t, 1);
  for (const auto& e : c.optimizer) fn("/optimizer/" + e.param + "/" + e.state, e.value, 2);
}

// The hash stored in meta.run_hash / model_hash: 16 hex digits of the 64-bit FNV-1a of `text`.
std::string text_hash(const std::string& text);
// The checksum stored with every tensor: "crc32:" + 8 hex digits of the CRC-32 (zlib's) of its raw bytes
// (little-endian, row-major), which Python's zlib.crc32(array.tobytes()) reproduces.
std::string tensor_checksum(const Tensor& t);

// Writes `c` to `path` atomically (temporary file in the same folder, fsync of file and folder, rename).
// Tensors must be f32, f64, i32 or i64 with unique names that are valid HDF5 link names (no '/').
// A failure (disk full, permission) is a UserError naming the path and leaves any previous file intact.
void write_checkpoint(const std::string& path, const Checkpoint& c);

struct ReadOptions {
  // Check the file's header (size, every byte outside tensor data) before HDF5 opens it, and every
  // tensor's checksum. Off only for files braid did not write or that another tool changed: HDF5 may then
  // be handed a damaged file.
  bool verify_checksums = true;
  bool weights_only = false;  // skip optimizer tensors and random streams (for --init-from)
  // A float tensor holding NaN or Inf is refused, naming it: a run must not resume from a diverged state
  // (checksums only prove the bytes are the ones saved). On only for `braid inspect`, which reports them.
  bool allow_non_finite = false;
};
// Reads and checks a checkpoint: its header, the format version (a newer one is refused), /meta, every
// tensor's checksum. A missing, empty, truncated, non-HDF5 or corrupt file is a UserError naming it (and
// the tensor where one is at fault), never a crash. Tensor data is read with several threads. Thread-safe.
Checkpoint read_checkpoint(const std::string& path, const ReadOptions& o = {});

// The meta of a checkpoint (the file's header checked first), without reading any tensor.
CheckpointMeta read_checkpoint_meta(const std::string& path);

// Differences between a checkpoint's params and buffers and a model's (name, description) list, one human
// message per differing tensor, in the model's order and then the checkpoint's extra tensors; empty when
// they match. The first message names the first differing tensor with both shapes, e.g.
// "tensor 'fc.weight': the checkpoint has f32[10, 512], the model f32[10, 784]".
std::vector<std::string> compare_to_model(const Checkpoint& c,
                                          const std::vector<std::pair<std::string, TensorDesc>>& expected);

// A checkpoint folder: files step_<8 digits>.h5 and `latest`, a small text file holding the name of the
// newest complete checkpoint. `latest` is replaced atomically, only after the checkpoint it names is
// complete and synced, so it never names a partial file.
class CheckpointDir {
 public:
  CheckpointDir(std::string dir, int64_t keep);  // keep >= 1; the folder is created by the first save
  // Writes step_<meta.step>.h5, moves `latest` to it, then deletes all but the newest `keep` checkpoints
  // (by step; the one `latest` names is never deleted) and temporaries left by dead processes. Returns
  // the checkpoint's path. A failure leaves the previous checkpoints and `latest` intact.
  std::string save(const Checkpoint& c);
  // The path of the checkpoint `latest` names; "" when there is none (no folder or no `latest`). A
  // `latest` that holds garbage or names a missing file is a UserError.
  std::string latest() const;
  // Checkpoint files in the folder, oldest step first.
  std::vector<std::string> list() const;
  const std::string& dir() const { return dir_; }
  // "latest" -> latest() of `dir` (a UserError when there is none); a folder, or a `latest` file -> that
  // folder's latest; otherwise the path itself, which must exist.
  static std::string resolve(const std::string& dir, const std::string& spec);
  // "step_00000042.h5"
  static std::string file_name(int64_t step);

 private:
  std::string dir_;
  int64_t keep_;
};

// `braid inspect`: step, epoch and the run a checkpoint came from, then a table of its tensors (name,
// shape, dtype, size, checksum). Reads and verifies every tensor.
std::string inspect_checkpoint(const std::string& path);
// The same text for a checkpoint already read from `path`.
std::string describe_checkpoint(const std::string& path, const Checkpoint& c);

}  // namespace braid::io
