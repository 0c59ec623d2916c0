// "Nothing is allocated inside a training step": counts heap allocations made by Executor::run on the
// training graph of a small GPT (attention, layer norm, gelu, dropout, embeddings, cross entropy) and of a
// CNN with batch norm, after construction. operator new is replaced in this test binary to count; what oneDNN
// allocates inside its own primitive executions (its argument maps and memory handles, ops/cpu/onednn_spatial.h)
// is not braid's and is left out.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <new>

#include "backends/cpu/executor.h"
#include "ops/cpu/onednn_spatial.h"
#include "training_graph.h"

namespace {
std::atomic<long> g_allocs{0};
}

// Under AddressSanitizer (scripts/sanitize.sh) operator new is ASan's: a replacement here would pair with its
// other variants (nothrow, arrays) as new/free mismatches in every test of this binary. The count is taken in the
// normal build; the sanitizer build skips these two tests, saying so.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kCounting = false;
#else
constexpr bool kCounting = true;
void* operator new(size_t n) {
  if (!braid::ops::cpu::in_library_call()) ++g_allocs;
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
#endif

using namespace braid;

namespace {
long allocations_per_run(const std::string& model_file, int64_t batch) {
  test::TrainingGraph t;
  test::load_training_graph(t, model_file, batch, 1);
  exec::Executor ex(t.g, t.store, t.keep);
  std::vector<Tensor> inputs;
  for (const auto& in : t.model.inputs) inputs.push_back(ex.input(in.name));
  auto fill_inputs = [&] {  // inputs share the arena with other values: refill before each run, as a loader does
    for (auto& t : inputs) t.zero();
  };
  fill_inputs();
  ex.run(true, 1, 0);  // warm-up (library-internal lazy initialisation, e.g. OpenBLAS buffers)
  long before = g_allocs.load();
  for (int i = 1; i <= 3; ++i) {
    fill_inputs();
    ex.run(true, 1, static_cast<uint64_t>(i));
  }
  return g_allocs.load() - before;
}
}  // namespace

TEST(NoAllocation, TinyGptTrainingStep) {
  if (!kCounting) GTEST_SKIP() << "SKIPPED, NOT PASSED: AddressSanitizer owns operator new; counted in the normal build";
  EXPECT_EQ(allocations_per_run(std::string(BRAID_SOURCE_DIR) + "/models/tiny_gpt.yaml", 2), 0);
}

TEST(NoAllocation, ResNetTrainingStep) {
  if (!kCounting) GTEST_SKIP() << "SKIPPED, NOT PASSED: AddressSanitizer owns operator new; counted in the normal build";
  EXPECT_EQ(allocations_per_run(std::string(BRAID_SOURCE_DIR) + "/models/fashion_resnet.yaml", 2), 0);
}
