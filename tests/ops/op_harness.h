// Test harness for ops without a graph: an eager GradBuilder that runs every emitted op at once on
// freshly allocated tensors, helpers that instantiate an op's sample (attrs completed, parameters
// created from ParamsFn, random values), and the split-consistency machinery (record every op call of a
// forward and its gradient rule, run each call on shards per split signature, reassemble, compare).
// Used by the registry-driven suites; no per-op code here beyond the documented split exceptions.
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

// ---- split consistency ----------------------------------------------------------------------------------
// Runs `def` on `in` with outputs of `out_descs` and the workspace poisoned with NaN first (integer outputs
// with -1), so that a kernel that leaves an element unwritten shows; a kernel that writes past an output
// fails the test. `in` is not cloned: in-place updates stay visible. ctx's workspace fields are filled here.
std::vector<Tensor> run_poisoned(const ops::OpDef& def, const ops::Attrs& attrs, const std::vector<Tensor>& in,
                                 const std::vector<TensorDesc>& out_descs, ops::KernelCtx ctx = {});
// Elements [begin, end) of `axis`; the parts joined along `axis` in order.
Tensor slice_along(const Tensor& t, int axis, int64_t begin, int64_t end);
Tensor concat_along(const std::vector<Tensor>& parts, int axis);
// max |a - b| / (1 + |b|) over the elements (infinity where either is NaN); the descs must match.
double max_rel_diff(const Tensor& a, const Tensor& b);

// One op call made while running a public op's forward and its gradient rule eagerly.
struct Call {
  std::string op;
  ops::Attrs attrs;            // completed
  std::vector<Tensor> inputs;  // the values it was called with (copies)
  ops::KernelCtx ctx;          // mode, random key and batch offset it ran with
  // The public op's own forward call. Its rank-0 outputs are losses or metrics (every other graph value
  // carries the batch axis): under P each shard holds the mean over its N_k positions (loss.cpp), and the
  // shards combine as sum_k (N_k / N) * value_k.
  bool public_forward = false;
  // Input that is the gradient of such a loss (its seed): each shard is fed dloss * N_k / N (loss.cpp). -1: none.
  int dloss_input = -1;
};
// Records the forward of `inst` and every op its gradient rule emits, in training or eval mode. Output 0's
// gradient is random, or, for a loss (rank 0), ones_like(loss) as the graph's autodiff seeds it.
std::vector<Call> record_forward_backward(const Instance& inst, bool training, Rng& rng);

// Signatures that hold in eval only, by design; nullptr where none. The reason is for the test's output.
const char* eval_only_reason(const std::string& op, const std::string& signature);

// What became of one signature of one call.
struct SignatureCheck {
  std::string name;
  std::vector<int> shards;  // shard counts run and compared (empty: no axis long enough to split)
  const char* skipped = nullptr;  // eval_only_reason in a training call: not run
};
// Runs `call` whole, then for every split signature on 2 and 3 shards: S inputs sliced (equal pieces, or
// balanced uneven ones where every split axis has the same length), B whole, P as random shares; a
// batch-split shard runs with KernelCtx::batch_offset = its first sample. Outputs (and inputs the kernel
// updates in training) reassembled (S concatenated, B equal on every shard, P summed; losses as above)
// must equal the unsplit call within 1e-10 relative (1e-6 for f32 values). Failures are gtest failures.
std::vector<SignatureCheck> check_call_splits(const Call& call, Rng& rng);

}  // namespace braid::testing
