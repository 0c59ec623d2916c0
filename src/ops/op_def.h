// OpDef: everything braid knows about one op, in one struct: attributes with defaults, parameters it
// creates, shape/dtype inference, gradient rule (emits other ops), split signatures (S/B/P), cost, test
// samples, kernels per device kind. Central code never switches on op names; it reads these fields.
// Shapes seen here are graph-level: the batch axis is axis 0 of every data input and output.
// Ops do not know stages, ranks, schedules or communication.
#pragma once
#include <array>
#include <map>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "core/ids.h"
#include "core/tensor.h"
#include "ops/activation.h"

namespace braid::ops {

// ---- attributes ----------------------------------------------------------------------------------------
enum class AttrKind { Int, Float, Bool, String, Ints };
using AttrValue = std::variant<int64_t, double, bool, std::string, std::vector<int64_t>>;

struct AttrSpec {
  std::string name;
  AttrKind kind = AttrKind::Int;
  std::optional<AttrValue> default_value;  // absent and !optional: the attribute is required
  bool optional = false;                   // may stay absent (the op's canonicalize derives it)
  std::vector<std::string> choices;        // String: the allowed values (empty = any)
  int list_len = 0;                        // Ints: exact length; a scalar is repeated (0 = any length)
  bool positive = false;                   // Int/Ints: every value >= 1
  bool non_negative = false;               // Int/Ints: every value >= 0
  std::string doc;
};

class Attrs {
 public:
  Attrs() = default;
  Attrs(std::initializer_list<std::pair<const std::string, AttrValue>> init) : values_(init) {}
  void set(const std::string& name, AttrValue v) { values_[name] = std::move(v); }
  bool has(const std::string& name) const { return values_.count(name) > 0; }
  int64_t i(const std::string& name) const;
  double f(const std::string& name) const;  // accepts an Int value too
  bool b(const std::string& name) const;
  const std::string& s(const std::string& name) const;
  const std::vector<int64_t>& ints(const std::string& name) const;
  const std::map<std::string, AttrValue>& all() const { return values_; }
  std::string str() const;  // "bias=true, out=10" (sorted by name)
  bool operator==(const Attrs& o) const { return values_ == o.values_; }

 private:
  const AttrValue& at(const std::string& name) const;
  std::map<std::string, AttrValue> values_;
};

// A user-facing mistake found by an op (bad shapes for this op, bad attribute combination). The graph
// builder reports it at the layer's location: "layer 'fc' (linear): <message>" plus the hint.
class OpError : public std::runtime_error {
 public:
  explicit OpError(const std::string& msg, std::string hint = "")
      : std::runtime_error(msg), hint_(std::move(hint)) {}
  const std::string& hint() const { return hint_; }

 private:
  std::string hint_;
};

// Sizes computed from shapes and attributes (workspaces, padded extents, products of attribute sizes): a
// result past int64 throws OpError, which the graph builder reports at the layer (issue 24).
inline int64_t size_mul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r))
    throw OpError("a size overflows 64 bits: " + std::to_string(a) + " * " + std::to_string(b), "are the sizes too large?");
  return r;
}
inline int64_t size_add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r))
    throw OpError("a size overflows 64 bits: " + std::to_string(a) + " + " + std::to_string(b), "are the sizes too large?");
  return r;
}

// ---- parameters ----------------------------------------------------------------------------------------
struct InitSpec {
  enum class Kind { Zeros, Ones, Constant, Uniform, Normal };
  Kind kind = Kind::Zeros;
  double a = 0, b = 0;  // Constant: a; Uniform: [a, b); Normal: mean a, std b
  std::string str() const;  // "uniform(-0.1, 0.1)"
  // Parses "zeros", "ones", "constant(v)", "uniform(a, b)", "normal(mean, std)"; nullopt + *err on failure.
  static std::optional<InitSpec> parse(const std::string& text, std::string* err);
  static InitSpec zeros() { return {Kind::Zeros}; }
  static InitSpec ones() { return {Kind::Ones}; }
  static InitSpec uniform(double a, double b) { return {Kind::Uniform, a, b}; }
  static InitSpec normal(double mean, double std) { return {Kind::Normal, mean, std}; }
};

struct ParamSpec {
  std::string name;  // local: "weight"; the graph prefixes the layer name ("fc.weight")
  TensorDesc desc;   // PyTorch's shape
  InitSpec init;     // PyTorch's default for the op
  bool buffer = false;  // state updated by the op (running statistics), not trained
};

// ---- split signatures (SBP) ------------------------------------------------------------------------------
struct Sbp {
  enum class Kind : uint8_t { Split, Broadcast, Partial };
  Kind kind = Kind::Broadcast;
  int axis = 0;  // Split only; graph-level axis (0 = batch)
  // Split only, all zero for a plain split (one contiguous chunk per device). Otherwise the axis is consecutive
  // segments of seg[0], seg[1], seg[2] units (a unit: the axis length / their sum; attention's [q | k | v] rows in
  // heads), each cut into one contiguous chunk per device: a device holds chunk r of every segment, in order.
  // Even only when every segment's units divide by the device count (whole heads on each device).
  std::array<int64_t, 3> seg{};
  static Sbp S(int axis) { return {Kind::Split, axis}; }
  static Sbp S(int axis, std::array<int64_t, 3> segments) { return {Kind::Split, axis, segments}; }
  static Sbp B() { return {Kind::Broadcast, 0}; }
  static Sbp P() { return {Kind::Partial, 0}; }
  bool segmented() const { return kind == Kind::Split && (seg[0] | seg[1] | seg[2]) != 0; }
  // An axis of `len` elements cuts into `parts` equal chunks (of every segment, when segmented).
  bool splits_evenly(int64_t len, int64_t parts) const;
  std::string str() const;  // "S(0)", "S(0)[4,2,2]", "B", "P"
  bool operator==(const Sbp&) const = default;
};

// One way to run the op on a group of devices: each input's and output's layout.
struct SplitSignature {
  std::string name;  // "data", "column", "row", ...
  std::vector<Sbp> inputs;
  std::vector<Sbp> outputs;
};

// ---- cost ------------------------------------------------------------------------------------------------
struct Cost {
  double flops = 0;  // floating-point operations (a multiply-add counts 2)
  double bytes = 0;  // bytes read and written from memory
};

// ---- kernels ---------------------------------------------------------------------------------------------
struct KernelCtx {
  bool training = true;
  uint64_t rng_key = 0;       // random stream of this node in this step (dropout masks)
  void* workspace = nullptr;  // scratch of the size OpDef::workspace asked for
  size_t workspace_bytes = 0;
  // Index of this run's first sample within the whole (unsplit) micro-batch: a data-parallel shard starts at
  // rank * per-device batch. Random masks are drawn by global element index (batch_offset + b) * per_sample + i,
  // so that every shard reproduces the single-device mask.
  int64_t batch_offset = 0;
  // A shard split on an axis other than the batch's (sequence parallelism: S(1) over the tensor group): this run's
  // part starts at index shard_start of shard_full along axis shard_axis (-1: not split so). Masks are drawn by the
  // element's index in the unsplit tensor, so the shards reproduce the unsplit run's.
  int shard_axis = -1;
  int64_t shard_start = 0, shard_full = 0;
};

// Inputs: data inputs then parameters/buffers (in ParamsFn order). Outputs are preallocated by the caller.
using CpuKernel = void (*)(const KernelCtx& ctx, const Attrs& attrs, std::span<const Tensor> in,
                           std::span<const Tensor> out);

// ---- gradient rule ----------------------------------------------------------------------------------------
// Implemented by the graph's autodiff pass (and by an eager executor in tests).
class GradBuilder {
 public:
  virtual ~GradBuilder() = default;
  // Appends a node of op `op` with these inputs and returns its outputs.
  virtual std::vector<ValueId> emit(const std::string& op, const Attrs& attrs,
                                    const std::vector<ValueId>& inputs) = 0;
  virtual const TensorDesc& desc(ValueId v) const = 0;
};

struct GradCtx {
  GradBuilder& g;
  const Attrs& attrs;
  std::vector<ValueId> inputs;   // forward inputs (data then params)
  std::vector<ValueId> outputs;  // forward outputs
  std::vector<ValueId> dout;     // gradient of each output (kNoValue: none flows; treat as zero)
  std::vector<bool> needs;       // needs[i]: input i wants a gradient
  std::vector<ValueId> din;      // filled by the rule: gradient of input i (kNoValue = none)
  std::string node_name;         // the forward node's name (a backward that redraws its random numbers names it)
};

// ---- test samples -------------------------------------------------------------------------------------
struct TestInput {
  TensorDesc desc;        // graph-level (batch axis included)
  int64_t int_high = 0;   // integer inputs: values drawn in [0, int_high)
  double lo = -1, hi = 1; // float inputs: uniform range
};

struct Sample {
  std::string name;
  Attrs attrs;                   // complete (defaults filled by the harness)
  std::vector<TestInput> inputs; // data inputs only; parameters come from ParamsFn
};

struct BadSample {
  std::string name;
  Attrs attrs;
  std::vector<TensorDesc> inputs;
  std::string error_contains;  // a fragment the OpError message must hold
};

// ---- the op --------------------------------------------------------------------------------------------
// What a graph with 16-bit values (graph::BuildOptions::half: precision bf16 / f16 on GPUs) does with the op's
// floating data inputs, as torch.autocast's op lists: F32 casts them to f32 (norms, softmax, losses, pools:
// precision-sensitive); Half casts them to the 16-bit type (the GEMM ops; their parameters stay f32 master
// weights, master_dtype); Follow runs in the inputs' dtype (elementwise and shape ops), casting 16-bit inputs
// to f32 when they are mixed with f32 ones.
enum class Autocast : uint8_t { F32, Half, Follow };

using ParamsFn = std::vector<ParamSpec> (*)(const Attrs&, std::span<const TensorDesc> data_inputs);
using InferFn = std::vector<TensorDesc> (*)(const Attrs&, std::span<const TensorDesc> inputs);
using GradFn = void (*)(GradCtx&);
using SplitFn = std::vector<SplitSignature> (*)(const Attrs&, std::span<const TensorDesc> inputs,
                                                std::span<const TensorDesc> outputs);
using CostFn = Cost (*)(const Attrs&, std::span<const TensorDesc> inputs, std::span<const TensorDesc> outputs);
using WorkspaceFn = size_t (*)(const Attrs&, std::span<const TensorDesc> inputs,
                               std::span<const TensorDesc> outputs);
using CanonicalizeFn = void (*)(Attrs&);
// Upper bound (exclusive) of integer data input `index` (tokens < num, targets < classes); 0 = unknown.
using IntBoundFn = int64_t (*)(const Attrs&, std::span<const TensorDesc> data_inputs, int index);

// Which collective a communication op (OpDef::collective) is: executors run it by this, never by its name.
enum class CollectiveKind : uint8_t {
  None,
  Slice,          // B -> S(axis): this rank's chunk
  AllGather,      // S(axis) -> B
  AllReduce,      // P -> B (sum)
  ReduceScatter,  // P -> S(axis) (sum)
  Copy,           // identity (its gradient is all-reduced)
  ToPartial,      // B -> P: rank 0 the value, the others zeros
  ParamGather,    // ZeRO-3: the parameter from the data-parallel replica that holds it, to every replica
};

struct OpDef {
  std::string name;
  std::string doc;
  std::vector<AttrSpec> attrs;
  int min_inputs = 1;   // data inputs (the layer's `from`)
  int max_inputs = 1;   // -1: unbounded
  bool internal = false;          // gradient and helper ops: not usable in model files
  bool differentiable = true;     // false: no gradient flows (metrics, integer ops)
  std::vector<int> nondiff_inputs;  // data inputs that never get gradients (targets, token ids)
  int public_outputs = 1;         // outputs beyond this are saved state for backward (not a layer's value)
  std::vector<int> mutated_inputs;  // inputs updated in place by the kernel in training (running stats)

  CanonicalizeFn canonicalize = nullptr;  // fills derived defaults (stride = kernel)
  ParamsFn params = nullptr;              // nullptr: no parameters
  InferFn infer = nullptr;                // required
  GradFn grad = nullptr;                  // required when differentiable
  SplitFn splits = nullptr;               // nullptr: only "all broadcast"
  CostFn cost = nullptr;                  // nullptr: one flop per output element
  WorkspaceFn workspace = nullptr;        // nullptr: no scratch
  IntBoundFn int_bound = nullptr;
  std::vector<Sample> (*samples)() = nullptr;          // required for public ops
  std::vector<BadSample> (*bad_samples)() = nullptr;   // inference errors the suite checks
  CpuKernel cpu = nullptr;
  // A communication op (comm_*: reshards of plan lowering): the executor runs it on the communicator of
  // the group its `group` attribute names; it has no CPU kernel.
  bool collective = false;
  CollectiveKind collective_kind = CollectiveKind::None;
  // Its kernel reads and writes every floating dtype itself (cast): a CPU executor never runs it on f32 copies.
  bool any_float = false;
  // Normalises by statistics over the batch (batch_norm): under sync_batch_norm the plan lowering replaces it, on
  // data-parallel stages, by ops whose statistics are those of the whole micro-batch (exec/lower.h).
  bool batch_statistics = false;
  // Cheap to run again and large to keep (normalisations, activations): `recompute: selective` recomputes it in
  // backward from its kept input instead of keeping its output (exec/lower.h).
  bool cheap_recompute = false;
  // Output 0 may take input 0's bytes (same shape and dtype): an elementwise kernel that reads element i of input 0
  // before it writes element i of output 0 and no other. The memory plan lets them share where input 0 dies at the
  // node (activation and dropout gradients: dx over dy).
  bool in_place = false;
  Autocast autocast = Autocast::F32;
  // An activation of ops/activation.h's list: its first row there (activation_of picks the variant its attribute
  // selects); with activation_grad set, the op is that activation's gradient <op>_grad. -1: not an activation.
  // Backends find their activation kernels and fusions from these, never from the op's name.
  int activation = -1;
  bool activation_grad = false;

  // Reference comparison with PyTorch (tests/torch_ref): relative and absolute tolerance in fp32.
  double torch_rtol = 1e-5;
  double torch_atol = 1e-6;
  // Finite-difference gradient check in double: tolerance on |analytic - numeric| / max(1, |numeric|).
  double gradcheck_tol = 1e-6;
};

// The activation (its variant by attribute) that node attributes `attrs` of activation op `op` compute;
// op.activation must be >= 0.
Act activation_of(const OpDef& op, const Attrs& attrs);
// The same from the op's first row: the row that the row's attribute, read from `attrs`, selects.
Act activation_of(Act first, const Attrs& attrs);

// Generic helpers shared by op definitions.
std::vector<SplitSignature> all_broadcast(std::span<const TensorDesc> inputs, std::span<const TensorDesc> outputs);
Cost default_cost(std::span<const TensorDesc> inputs, std::span<const TensorDesc> outputs, double flops_per_out = 1);
// The op's cost on these shapes: its own cost function, else default_cost.
Cost op_cost(const OpDef& op, const Attrs& attrs, std::span<const TensorDesc> in, std::span<const TensorDesc> out);
// An internal op (gradient or helper): not usable in model files, not differentiable, `num_inputs` inputs.
// Callers fill in inference, kernel, splits, cost and attributes.
OpDef internal_op(std::string name, std::string doc, int num_inputs);
// Fills defaults and checks kinds/choices/ranges of `attrs` against `def`; throws OpError on a mistake.
void complete_attrs(const OpDef& def, Attrs& attrs);

}  // namespace braid::ops
