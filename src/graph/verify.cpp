// The checks of verify(); a failure is a bug in a pass or an op, never a user's mistake.
#include "graph/verify.h"

namespace braid::graph {

void verify(const Graph& g) {
  std::vector<bool> defined(g.values().size(), false);
  for (const auto& v : g.values())
    if (v.kind != ValueKind::Activation) defined[v.id.idx()] = true;
  for (const auto& n : g.nodes()) {
    BRAID_ASSERT(n.op != nullptr, "node '", n.name, "' has no op");
    std::vector<TensorDesc> in;
    for (ValueId v : n.inputs) {
      BRAID_ASSERT(v.valid() && v.idx() < g.values().size(), "node '", n.name, "' reads an unknown value");
      BRAID_ASSERT(defined[v.idx()], "node '", n.name, "' reads '", g.value(v).name, "' before it is produced");
      in.push_back(g.value(v).desc);
    }
    std::vector<TensorDesc> out;
    if (n.sharded)
      for (ValueId v : n.outputs) out.push_back(g.value(v).desc);
    else
      out = n.op->infer(n.attrs, in);
    BRAID_ASSERT(out.size() == n.outputs.size(), "node '", n.name, "' output count changed");
    for (size_t k = 0; k < out.size(); ++k) {
      const Value& v = g.value(n.outputs[k]);
      BRAID_ASSERT(!defined[v.id.idx()], "value '", v.name, "' produced twice");
      BRAID_ASSERT(v.producer == n.id, "value '", v.name, "' names the wrong producer");
      BRAID_ASSERT(out[k] == v.desc, "node '", n.name, "' output ", k, " is ", v.desc.str(), " but infers ", out[k].str());
      defined[v.id.idx()] = true;
    }
  }
  for (const auto& p : g.params())
    if (p.grad.valid())
      BRAID_ASSERT(g.value(p.grad).desc.shape == p.spec.desc.shape, "gradient of ", p.name, " is mis-shaped");
  for (const auto& [name, v] : g.outputs) BRAID_ASSERT(defined[v.idx()], "output ", name, " undefined");
}

}  // namespace braid::graph
