// Test harness for ops without a graph: an eager GradBuilder that runs every emitted op at once on
// freshly allocated tensors, and helpers that instantiate an op's sample (attrs completed, parameters
// created from ParamsFn, random values). Used by the registry-driven suites; no per-op code here.
#pragma once
#include <string>
#include <vector>

#include "core/rng.h"
#include "ops/registry.h"

namespace braid::testing {

class Eager : public ops::GradBuilder {
 public:
  ValueId add(Tensor t);
  std::vector<ValueId> emit(const std::string& op, const ops::Attrs& attrs, const std::vector<ValueId>& inputs) override;
  const TensorDesc& desc(ValueId v) const override { return vals_.at(v.idx()).desc(); }
  const Tensor& val(ValueId v) const { return vals_.at(v.idx()); }
  ops::KernelCtx ctx;

 private:
  std::vector<Tensor> vals_;
};

// One instantiated sample: completed attrs, descs and tensors of data inputs then params.
struct Instance {
  const ops::OpDef* def = nullptr;
  std::string label;  // "op/sample"
  ops::Attrs attrs;
  std::vector<ops::ParamSpec> params;
  std::vector<Tensor> inputs;  // data inputs then params/buffers
  int num_data = 0;
  int64_t batch_offset = 0;  // KernelCtx::batch_offset of the runs (a shard's first sample in the whole batch)
  // Whether input i takes part in gradient checks (float, not a buffer, not a non-differentiable input).
  bool differentiable_input(int i) const;
};

// Builds the instance of `sample` in `dtype` (float inputs converted; integers kept), values from rng.
Instance instantiate(const ops::OpDef& def, const ops::Sample& sample, DType dtype, Rng& rng);
// Runs the forward kernel; returns the outputs.
std::vector<Tensor> run_forward(const Instance& inst, bool training = true, uint64_t rng_key = 7);
// Runs forward then the op's gradient rule eagerly with output gradient `dy` for output 0.
// Returns the gradient of each input (undefined Tensor where none).
std::vector<Tensor> run_backward(const Instance& inst, const Tensor& dy, uint64_t rng_key = 7);

std::vector<const ops::OpDef*> public_ops();

}  // namespace braid::testing
