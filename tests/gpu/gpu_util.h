// Shared by the gpu tests: skip (saying why) where no CUDA device is visible, and a device arena + stream
// for eager kernel calls, and the source tree (models/) the tests read.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "backends/cuda/kernels/device_info.h"
#include "backends/cuda/kernels/runtime.h"

#define BRAID_REQUIRE_GPU()                                                                                  \
  do {                                                                                                       \
    std::string braid_why_;                                                                                  \
    if (::braid::cuda::device_count(&braid_why_) == 0)                                                       \
      GTEST_SKIP() << "no GPU here (" << braid_why_ << "); the gpu tests run in scripts/gpu_check.sh";        \
  } while (0)

namespace braid::testing {

// The source tree: $BRAID_SOURCE_DIR when set (the binary carried to another machine, scripts/gpu_check.sh),
// else the build's source directory compiled in.
inline std::string source_dir() {
  const char* env = std::getenv("BRAID_SOURCE_DIR");
  return env && *env ? std::string(env) : std::string(BRAID_SOURCE_DIR);
}

struct Device {
  explicit Device(size_t arena_bytes = size_t{1} << 30) : stream(0), arena(0, arena_bytes) {}
  cuda::Stream stream;
  cuda::DeviceArena arena;
  Tensor alloc(const TensorDesc& d) { return Tensor::view(arena.take(std::max<size_t>(d.bytes(), 1), "test"), d); }
  Tensor upload(const Tensor& h) {
    Tensor t = alloc(h.desc());
    stream.upload(t.raw(), h.raw(), h.bytes());
    return t;
  }
  Tensor download(const Tensor& d) {
    Tensor h = Tensor::empty(d.desc());
    stream.download(h.raw(), d.raw(), d.bytes());
    return h;
  }
};

}  // namespace braid::testing
