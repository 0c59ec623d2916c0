// GPU tests (CTest label `gpu`): skipped, saying so, where no CUDA device is present.
#include <gtest/gtest.h>

#include "backends/cuda/kernels/device_info.h"

TEST(Gpu, DeviceVisible) {
  std::string why;
  int n = braid::cuda::device_count(&why);
  if (n == 0) GTEST_SKIP() << "no GPU here (" << why << "); the gpu tests run in scripts/gpu_check.sh";
  EXPECT_FALSE(braid::cuda::device_name(0).empty());
}
