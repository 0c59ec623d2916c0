// The backends' supports() (exec/backend.h), asked of every registry op, and check_supported's error for a graph
// the CUDA backend cannot run. Runs everywhere: nothing here touches a GPU.
#include <gtest/gtest.h>

#include "backends/cuda/cuda_backend.h"
#include "core/error.h"
#include "exec/backend.h"
#include "exec/preflight.h"
#include "graph/build.h"
#include "io/model_spec.h"
#include "ops/registry.h"

using namespace braid;

namespace {

std::string text_of(const Diagnostics& d) {
  try {
    d.throw_if_any();
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

graph::Graph training_graph(const std::string& text) {
  Diagnostics d;
  io::ModelSpec m = io::parse_model(text, "m.yaml", {}, d);
  d.throw_if_any();
  graph::BuildOptions bo;
  bo.with_backward = true;
  return graph::build_graph(m, 4, bo);
}

const char* kMlp = R"(inputs:
  x: {shape: [8], dtype: DT}
  y: {shape: [], dtype: i64}
layers:
  - {name: fc1, op: linear, out: 16}
  - {name: act, op: gelu, approximate: tanh}
  - {name: fc2, op: linear, out: 4}
  - {name: loss, op: cross_entropy, from: [fc2, y]}
outputs: [loss]
)";

std::string mlp(const std::string& dtype) {
  std::string s = kMlp;
  s.replace(s.find("DT"), 2, dtype);
  return s;
}

}  // namespace

TEST(BackendSupports, CudaModuleAnswersForEveryRegistryOp) {
  auto cuda = exec::make_cuda_backend();
  const exec::Backend* cpu = exec::backend("cpu");
  ASSERT_NE(cpu, nullptr);
  int asked = 0;
  for (const ops::OpDef* d : ops::Registry::get().all()) {
    EXPECT_TRUE(cuda->supports(*d, DType::f32)) << d->name;
    EXPECT_TRUE(cuda->supports(*d, DType::bf16)) << d->name;
    if (!d->collective) EXPECT_FALSE(cuda->supports(*d, DType::f64)) << d->name << ": CUDA kernels take f32 and bf16";
    EXPECT_TRUE(cpu->supports(*d, DType::f32)) << d->name;
    EXPECT_TRUE(cpu->supports(*d, DType::f64)) << d->name;
    ++asked;
  }
  EXPECT_GT(asked, 60);
}

TEST(BackendSupports, CheckNamesTheOpTheLayerAndTheBackend) {
  auto cuda = exec::make_cuda_backend();
  {
    Diagnostics d;
    exec::check_supported(*cuda, training_graph(mlp("f32")), d);
    EXPECT_TRUE(d.empty()) << text_of(d);
  }
  Diagnostics d;
  exec::check_supported(*cuda, training_graph(mlp("f64")), d);
  ASSERT_FALSE(d.empty());
  const std::string s = text_of(d);
  EXPECT_NE(s.find("m.yaml:5"), std::string::npos) << s;  // fc1, the first node: its layer's line
  EXPECT_NE(s.find("layer 'fc1': op 'linear' has no cuda kernel for f64 values"), std::string::npos) << s;
  EXPECT_NE(s.find("op 'gelu_grad' (part of its gradient)"), std::string::npos) << s;
  // Once per op and dtype: linear appears in two layers, one error.
  size_t n = 0;
  for (size_t at = s.find("op 'linear' has"); at != std::string::npos; at = s.find("op 'linear' has", at + 1)) ++n;
  EXPECT_EQ(n, 1u) << s;
  Diagnostics dc;
  exec::check_supported(*exec::backend("cpu"), training_graph(mlp("f64")), dc);
  EXPECT_TRUE(dc.empty()) << text_of(dc);
}
