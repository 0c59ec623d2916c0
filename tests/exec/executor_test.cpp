// The executor runs forward and backward on a hand-built graph and gets the analytic gradients,
// including a value used twice (its gradient contributions are summed).
#include <gtest/gtest.h>

#include "backends/cpu/executor.h"
#include "graph/autodiff.h"
#include "graph/verify.h"
#include "ops/registry.h"

using namespace braid;
using namespace braid::graph;

TEST(Executor, SharedValueGradientsAreSummed) {
  Graph g(2);
  const auto& mul = ops::Registry::get().at("mul");
  const auto& add = ops::Registry::get().at("add");
  ValueId x = g.add_input("x", TensorDesc{Shape{2, 3}, DType::f64});
  ValueId w = g.add_param("lay", ops::ParamSpec{"w", TensorDesc{Shape{3}, DType::f64}, ops::InitSpec::ones(), false});
  ValueId y = g.add_node(mul, {}, {x, w}, 1, "lay", "lay", {}, false)[0];
  ValueId z = g.add_node(add, {}, {y, y}, 2, "sum", "sum", {}, false)[0];
  g.outputs.emplace_back("z", z);
  append_backward(g);
  verify(g);
  exec::ParamStore store;
  store.create(g, 1);
  exec::Executor ex(g, store, {z, g.params()[0].grad});
  double* xin = ex.input("x").data<double>();
  for (int i = 0; i < 6; ++i) xin[i] = i + 1;
  ex.run(true, 1, 0);
  // z = 2 * x * w, seed dz = 1: dw[j] = sum_b 2 * x[b, j].
  const double* dw = ex.value(g.params()[0].grad).data<double>();
  EXPECT_DOUBLE_EQ(dw[0], 2 * (1 + 4));
  EXPECT_DOUBLE_EQ(dw[1], 2 * (2 + 5));
  EXPECT_DOUBLE_EQ(dw[2], 2 * (3 + 6));
  EXPECT_DOUBLE_EQ(ex.value(z).data<double>()[4], 2 * 5.0);
}
