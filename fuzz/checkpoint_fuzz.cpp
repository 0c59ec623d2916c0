// libFuzzer target for checkpoint files: the input's first byte picks a mode, the rest is the file. Mode bit 0
// reseals the file first (recomputes the header's, the metadata's and the index's checksums, as a crafted
// file would have them), so that mutations reach the index decoder and the tensor reads instead of stopping
// at a checksum; bit 1 reads weights only (--init-from); bit 2 allows non-finite values (braid inspect).
// A UserError is tolerated; anything else (another exception, a crash, a sanitizer report, an allocation
// over -rss_limit_mb / -malloc_limit_mb) is a finding.
//
// With BRAID_FUZZ_SEEDS=DIR set, the first call writes seed inputs (real checkpoints of every kind of
// content, plain and resealed) into DIR: scripts/fuzz_checkpoint.sh does this before fuzzing.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "core/error.h"
#include "io/checkpoint.h"
#include "io/checkpoint_header.h"

namespace {

using namespace braid;
using namespace braid::io;

std::string scratch_path() {
  const char* tmp = std::getenv("TMPDIR");
  return std::string(tmp && *tmp ? tmp : "/tmp") + "/braid_checkpoint_fuzz_" + std::to_string(::getpid()) + ".h5";
}

void write_bytes(const std::string& path, const char* data, size_t n) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(data, static_cast<std::streamsize>(n));
}

Tensor ramp(Shape s, DType t) {
  Tensor x = Tensor::empty({std::move(s), t});
  for (int64_t i = 0; i < x.numel(); ++i) set_from_double(x, i, static_cast<double>(i % 7) - 3);
  return x;
}

// Checkpoints with every kind of content braid writes: chunked and contiguous tensors of each dtype, an
// empty one, a scalar, optimizer state, random streams, an fp16 run's loss scale.
void write_seeds(const std::string& dir) {
  for (int kind = 0; kind < 3; ++kind) {
    Checkpoint c;
    c.meta.step = 12;
    c.meta.epoch = 1;
    c.meta.samples_seen = 384;
    c.meta.run_text = "model: tiny.yaml\ntrain: {batch: 32, steps: 100}\n";
    c.meta.model_text = "inputs: {x: [4]}\nlayers:\n  - {name: fc, op: linear, out: 3}\n";
    c.params = {{"fc.weight", ramp(Shape{3, 4}, DType::f32)}, {"fc.bias", ramp(Shape{3}, DType::f32)}};
    if (kind == 1) c.params.push_back({"w2", ramp(Shape{40, 16}, DType::f64)});
    c.buffers = {{"bn.num_batches_tracked", ramp(Shape{}, DType::i64)}, {"bn.mean", ramp(Shape{4}, DType::f64)},
                 {"e.empty", Tensor::empty({Shape{0, 2}, DType::f32})}, {"ids", ramp(Shape{2, 2}, DType::i32)}};
    if (kind != 2) {
      for (const auto& [name, t] : c.params) c.optimizer.push_back({name, "exp_avg", ramp(t.shape(), t.dtype())});
      c.optimizer_type = "adamw";
      c.optimizer_steps = 12;
    }
    if (kind == 0) {
      c.loss_scale = 65536;
      c.loss_scale_growth_tracker = 3;
    }
    c.rng = {{"dropout", 1, 12}, {"shuffle", 1, 1}, {"init", 1, 0}};
    c.data = {1, 64, 1};
    c.plan_text = "stages: 1\n";
    const std::string file = dir + "/.seed.h5";
    write_checkpoint(file, c);
    std::ifstream in(file, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (char mode : {'\0', '\1', '\2', '\5'}) {
      const std::string seed = std::string(1, mode) + bytes;
      write_bytes(dir + "/seed_" + std::to_string(kind) + "_" + std::to_string(mode), seed.data(), seed.size());
    }
    std::remove(file.c_str());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = scratch_path();
  if (const char* seeds = std::getenv("BRAID_FUZZ_SEEDS"); seeds && *seeds) {
    static bool written = (write_seeds(seeds), true);
    (void)written;
  }
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  write_bytes(path, reinterpret_cast<const char*>(data) + 1, size - 1);
  if (mode & 1) ckpt_header::reseal(path);
  ReadOptions o;
  o.weights_only = (mode & 2) != 0;
  o.allow_non_finite = (mode & 4) != 0;
  try {
    Checkpoint c = read_checkpoint(path, o);
    (void)describe_checkpoint(path, c);  // what braid inspect prints of it
  } catch (const UserError&) {
  }
  try {
    (void)read_checkpoint_meta(path);
  } catch (const UserError&) {
  }
  return 0;
}
