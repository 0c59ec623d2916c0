// Builds the registry from op_list.inc: each line calls one family's register function.
#include "ops/registry.h"

#include <algorithm>

namespace braid::ops {

#define BRAID_OP_FAMILY(f) void register_##f(Registry&);
#include "ops/op_list.inc"
#undef BRAID_OP_FAMILY

const Registry& Registry::get() {
  static const Registry reg = [] {
    Registry r;
#define BRAID_OP_FAMILY(f) register_##f(r);
#include "ops/op_list.inc"
#undef BRAID_OP_FAMILY
    return r;
  }();
  return reg;
}

const OpDef* Registry::find(const std::string& name) const {
  for (const auto& op : ops_)
    if (op->name == name) return op.get();
  return nullptr;
}

const OpDef& Registry::at(const std::string& name) const {
  const OpDef* op = find(name);
  BRAID_ASSERT(op != nullptr, "no op named '", name, "' is registered");
  return *op;
}

std::vector<const OpDef*> Registry::all() const {
  std::vector<const OpDef*> out;
  for (const auto& op : ops_) out.push_back(op.get());
  std::sort(out.begin(), out.end(), [](auto* a, auto* b) { return a->name < b->name; });
  return out;
}

std::vector<std::string> Registry::public_names() const {
  std::vector<std::string> out;
  for (const auto* op : all())
    if (!op->internal) out.push_back(op->name);
  return out;
}

void Registry::add(OpDef def) {
  BRAID_ASSERT(find(def.name) == nullptr, "op '", def.name, "' registered twice");
  BRAID_ASSERT(def.infer != nullptr, "op '", def.name, "' has no inference");
  BRAID_ASSERT(!def.differentiable || def.internal || def.grad != nullptr, "op '", def.name, "' has no gradient");
  ops_.push_back(std::make_unique<OpDef>(std::move(def)));
}

}  // namespace braid::ops
