// Eager execution of ops for the registry-driven suites.
#include "op_harness.h"

#include <algorithm>
#include <cmath>

namespace braid::testing {

using namespace braid::ops;

ValueId Eager::add(Tensor t) {
  vals_.push_back(std::move(t));
  return ValueId(static_cast<int32_t>(vals_.size() - 1));
}

std::vector<ValueId> Eager::emit(const std::string& op, const Attrs& attrs_in, const std::vector<ValueId>& inputs) {
  const OpDef& def = Registry::get().at(op);
  Attrs attrs = attrs_in;
  complete_attrs(def, attrs);
  std::vector<TensorDesc> descs;
  std::vector<Tensor> in;
  for (auto v : inputs) {
    descs.push_back(desc(v));
    in.push_back(val(v));
  }
  auto out_descs = def.infer(attrs, descs);
  std::vector<Tensor> out;
  // Outputs start as garbage (NaN), as in the executor's reused arena: kernels must write every element.
  for (const auto& d : out_descs) {
    out.push_back(Tensor::empty(d));
    if (is_float(d.dtype))
      for (int64_t i = 0; i < out.back().numel(); ++i) set_from_double(out.back(), i, std::nan(""));
  }
  Tensor ws;
  KernelCtx c = ctx;
  if (def.workspace) {
    ws = Tensor::empty({Shape{static_cast<int64_t>(def.workspace(attrs, descs, out_descs))}, DType::f32});  // bytes*4, ample
    c.workspace = ws.raw();
    c.workspace_bytes = ws.bytes();
  }
  BRAID_ASSERT(def.cpu != nullptr, "op ", op, " has no CPU kernel");
  def.cpu(c, attrs, in, out);
  std::vector<ValueId> ids;
  for (auto& t : out) ids.push_back(add(t));
  return ids;
}

bool Instance::differentiable_input(int i) const {
  if (!def->differentiable) return false;
  if (!is_float(inputs[static_cast<size_t>(i)].dtype())) return false;
  if (i < num_data) return std::find(def->nondiff_inputs.begin(), def->nondiff_inputs.end(), i) == def->nondiff_inputs.end();
  return !params[static_cast<size_t>(i - num_data)].buffer;
}

static Tensor random_tensor(const TensorDesc& d, double lo, double hi, int64_t int_high, Rng& rng) {
  Tensor t = Tensor::empty(d);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (is_int(d.dtype)) set_from_double(t, i, static_cast<double>(rng.below(static_cast<uint64_t>(std::max<int64_t>(int_high, 1)))));
    else set_from_double(t, i, rng.uniform(lo, hi));
  }
  return t;
}

Instance instantiate(const OpDef& def, const Sample& sample, DType dtype, Rng& rng) {
  Instance inst;
  inst.def = &def;
  inst.label = def.name + "/" + sample.name;
  inst.attrs = sample.attrs;
  complete_attrs(def, inst.attrs);
  std::vector<TensorDesc> data;
  for (const auto& ti : sample.inputs) {
    TensorDesc d = ti.desc;
    if (is_float(d.dtype)) d.dtype = dtype;
    data.push_back(d);
    inst.inputs.push_back(random_tensor(d, ti.lo, ti.hi, ti.int_high, rng));
  }
  inst.num_data = static_cast<int>(data.size());
  if (def.params) inst.params = def.params(inst.attrs, data);
  for (auto& p : inst.params) {
    TensorDesc d = p.desc;
    if (is_float(d.dtype)) d.dtype = dtype;
    p.desc = d;
    if (p.buffer) {  // buffers start at their init (running_var = 1), nudged to stay valid
      Tensor t = Tensor::empty(d);
      for (int64_t i = 0; i < t.numel(); ++i)
        set_from_double(t, i, (p.init.kind == InitSpec::Kind::Ones ? 1.0 : 0.0) + 0.25 * rng.uniform());
      inst.inputs.push_back(t);
    } else {
      inst.inputs.push_back(random_tensor(d, -1, 1, 0, rng));
    }
  }
  return inst;
}

std::vector<Tensor> run_forward(const Instance& inst, bool training, uint64_t rng_key) {
  Eager e;
  e.ctx.training = training;
  e.ctx.rng_key = rng_key;
  e.ctx.batch_offset = inst.batch_offset;
  std::vector<ValueId> in;
  for (const auto& t : inst.inputs) in.push_back(e.add(t.clone()));
  auto out = e.emit(inst.def->name, inst.attrs, in);
  std::vector<Tensor> res;
  for (auto v : out) res.push_back(e.val(v));
  return res;
}

std::vector<Tensor> run_backward(const Instance& inst, const Tensor& dy, uint64_t rng_key) {
  Eager e;
  e.ctx.training = true;
  e.ctx.rng_key = rng_key;
  e.ctx.batch_offset = inst.batch_offset;
  std::vector<ValueId> in;
  for (const auto& t : inst.inputs) in.push_back(e.add(t.clone()));
  auto out = e.emit(inst.def->name, inst.attrs, in);
  GradCtx c{e, inst.attrs, in, out, std::vector<ValueId>(out.size(), kNoValue), {}, std::vector<ValueId>(in.size(), kNoValue)};
  c.dout[0] = e.add(dy);
  for (size_t i = 0; i < in.size(); ++i) c.needs.push_back(inst.differentiable_input(static_cast<int>(i)));
  inst.def->grad(c);
  std::vector<Tensor> res;
  for (size_t i = 0; i < in.size(); ++i) res.push_back(c.din[i].valid() && c.needs[i] ? e.val(c.din[i]) : Tensor());
  return res;
}

std::vector<const OpDef*> public_ops() {
  std::vector<const OpDef*> out;
  for (const auto* d : Registry::get().all())
    if (!d->internal) out.push_back(d);
  return out;
}

}  // namespace braid::testing
