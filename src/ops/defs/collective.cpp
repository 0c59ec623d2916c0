// Communication ops: the reshards that plan lowering (src/exec/lower.h) inserts where a producer's layout
// over a device group differs from what its consumer's split signature needs. They are ordinary graph nodes
// with gradient rules, so autodiff of a lowered per-device graph derives the backward communication
// (Megatron's f/g operators are comm_copy / comm_all_reduce). The executor runs them on the communicator of
// the group named by `group` ("tensor": the stage's tensor group; "data": its data-parallel group); they
// have no CPU kernel. `axis` is a tensor axis (axis 0 of an activation is the batch), `parts` the group size.
//   comm_slice          B -> S(axis): keep this rank's chunk.             backward: comm_all_gather
//   comm_all_gather     S(axis) -> B: concatenate every rank's chunk.      backward: comm_slice
//   comm_all_reduce     P -> B: sum over ranks (rank order).              backward: identity
//   comm_reduce_scatter P -> S(axis): this rank's chunk of the sum.       backward: comm_all_gather
//   comm_copy           B -> B entering a split op: identity.             backward: comm_all_reduce
//   comm_to_partial     B -> P: rank 0 keeps the value, others hold zeros. backward: identity
//   comm_gather_param   ZeRO-3 (group data): the parameter `param` from the replica that holds it, broadcast to the
//                       others just before a node uses it (the executor knows who holds it). backward: identity (the
//                       gradient goes to the holder with the others: exec's gradient shards)
// Gradient layouts: the gradient of a B value is B (identical on every rank), of S(a) is S(a), of P is B.
#include "ops/registry.h"

namespace braid::ops {
namespace {

std::vector<AttrSpec> comm_attrs(bool with_axis) {
  std::vector<AttrSpec> a{
      {"group", AttrKind::String, AttrValue(std::string("tensor")), false, {"tensor", "data"}, 0, false, false,
       "the device group: the stage's tensor group or its data-parallel group"},
      {"parts", AttrKind::Int, std::nullopt, false, {}, 0, true, false, "the group's size"}};
  if (with_axis)
    a.push_back({"axis", AttrKind::Int, std::nullopt, false, {}, 0, false, true, "tensor axis of the split"});
  return a;
}

int axis_of(const Attrs& a, const TensorDesc& d) {
  int64_t ax = a.i("axis");
  if (ax >= d.shape.rank())
    throw OpError("axis " + std::to_string(ax) + " is out of range for " + d.str());
  return static_cast<int>(ax);
}

std::vector<TensorDesc> infer_same(const Attrs&, std::span<const TensorDesc> in) { return {in[0]}; }

std::vector<TensorDesc> infer_divide(const Attrs& a, std::span<const TensorDesc> in) {
  TensorDesc d = in[0];
  int ax = axis_of(a, d);
  int64_t n = a.i("parts");
  if (d.shape[ax] % n != 0)
    throw OpError("axis " + std::to_string(ax) + " of " + d.str() + " does not split into " + std::to_string(n) +
                  " equal parts");
  std::vector<int64_t> dims = d.shape.dims();
  dims[static_cast<size_t>(ax)] /= n;
  d.shape = Shape(dims);
  return {d};
}

std::vector<TensorDesc> infer_multiply(const Attrs& a, std::span<const TensorDesc> in) {
  TensorDesc d = in[0];
  int ax = axis_of(a, d);
  std::vector<int64_t> dims = d.shape.dims();
  dims[static_cast<size_t>(ax)] *= a.i("parts");
  d.shape = Shape(dims);
  return {d};
}

Attrs same_group(const Attrs& a, bool with_axis) {
  Attrs g{{"group", a.s("group")}, {"parts", a.i("parts")}};
  if (with_axis) g.set("axis", a.i("axis"));
  return g;
}

void grad_all_gather(GradCtx& c) {  // of comm_slice and comm_reduce_scatter
  if (c.needs[0] && c.dout[0].valid()) c.din[0] = c.g.emit("comm_all_gather", same_group(c.attrs, true), {c.dout[0]})[0];
}
void grad_slice(GradCtx& c) {  // of comm_all_gather
  if (c.needs[0] && c.dout[0].valid()) c.din[0] = c.g.emit("comm_slice", same_group(c.attrs, true), {c.dout[0]})[0];
}
void grad_identity(GradCtx& c) {  // of comm_all_reduce and comm_to_partial
  if (c.needs[0] && c.dout[0].valid()) c.din[0] = c.dout[0];
}
void grad_all_reduce(GradCtx& c) {  // of comm_copy
  if (c.needs[0] && c.dout[0].valid()) c.din[0] = c.g.emit("comm_all_reduce", same_group(c.attrs, false), {c.dout[0]})[0];
}

Cost comm_cost(const Attrs&, std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
  return default_cost(in, out, 0);  // data movement; the planner's cost model prices the collective
}

OpDef comm_def(const std::string& name, CollectiveKind kind, const std::string& doc, bool with_axis, InferFn infer,
               GradFn grad) {
  OpDef d = internal_op(name, doc, 1);
  d.collective = true;
  d.collective_kind = kind;
  d.differentiable = true;
  d.attrs = comm_attrs(with_axis);
  d.infer = infer;
  d.grad = grad;
  d.cost = comm_cost;
  return d;
}

}  // namespace

void register_collective(Registry& r) {
  r.add(comm_def("comm_slice", CollectiveKind::Slice, "B -> S(axis): this rank's chunk along axis", true, infer_divide, grad_all_gather));
  r.add(comm_def("comm_all_gather", CollectiveKind::AllGather, "S(axis) -> B: every rank's chunk concatenated in rank order", true,
                 infer_multiply, grad_slice));
  r.add(comm_def("comm_all_reduce", CollectiveKind::AllReduce, "P -> B: the sum over the group's ranks, folded in rank order", false, infer_same,
                 grad_identity));
  r.add(comm_def("comm_reduce_scatter", CollectiveKind::ReduceScatter, "P -> S(axis): this rank's chunk of the sum over ranks", true, infer_divide,
                 grad_all_gather));
  r.add(comm_def("comm_copy", CollectiveKind::Copy, "B value entering a split op: identity; its gradient is all-reduced", false, infer_same,
                 grad_all_reduce));
  OpDef gather = comm_def("comm_gather_param", CollectiveKind::ParamGather,
                          "ZeRO-3: the parameter from the data-parallel replica holding it, to every replica", false,
                          infer_same, grad_identity);
  gather.attrs.push_back({"param", AttrKind::String, std::nullopt, false, {}, 0, false, false,
                          "the parameter's full name"});
  r.add(gather);
  r.add(comm_def("comm_to_partial", CollectiveKind::ToPartial, "B -> P: rank 0 keeps the value, the other ranks hold zeros", false, infer_same,
                 grad_identity));
}

}  // namespace braid::ops
