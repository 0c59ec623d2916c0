// Layer table and DOT output.
#include "graph/print.h"

#include <sstream>

namespace braid::graph {

double node_flops(const Graph& g, const Node& n) {
  std::vector<TensorDesc> in, out;
  for (ValueId v : n.inputs) in.push_back(g.value(v).desc);
  for (ValueId v : n.outputs) out.push_back(g.value(v).desc);
  if (n.op->cost) return n.op->cost(n.attrs, in, out).flops;
  return ops::default_cost(in, out).flops;
}

std::vector<LayerRow> layer_table(const Graph& g) {
  std::vector<LayerRow> rows;
  for (const auto& n : g.nodes()) {
    if (n.backward) continue;
    LayerRow r;
    r.name = n.layer;
    r.op = n.op->name;
    r.out_shape = g.value(n.outputs[0]).desc.shape;
    r.dtype = g.value(n.outputs[0]).desc.dtype;
    r.flops = node_flops(g, n);
    r.loc = n.loc;
    for (const auto& p : g.params())
      if (p.layer == n.layer && !p.spec.buffer) r.params += p.spec.desc.numel();
    rows.push_back(r);
  }
  return rows;
}

static std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o;
}

std::string to_dot(const Graph& g, bool include_backward) {
  std::ostringstream os;
  os << "digraph braid {\n  rankdir=TB;\n  node [shape=box, fontname=\"Helvetica\"];\n";
  for (ValueId v : g.inputs())
    os << "  \"" << esc(g.value(v).name) << "\" [shape=ellipse, label=\"" << esc(g.value(v).name) << "\\n"
       << g.value(v).desc.str() << "\"];\n";
  for (const auto& n : g.nodes()) {
    if (n.backward && !include_backward) continue;
    os << "  \"" << esc(n.name) << "\" [label=\"" << esc(n.name) << "\\n" << n.op->name << "\\n"
       << g.value(n.outputs[0]).desc.str() << "\"" << (n.backward ? ", style=dashed" : "") << "];\n";
    for (int k = 0; k < n.num_data_inputs; ++k) {
      const Value& in = g.value(n.inputs[static_cast<size_t>(k)]);
      std::string src = in.kind == ValueKind::Input ? in.name : g.node(in.producer).name;
      if (in.kind == ValueKind::Activation && g.node(in.producer).backward && !include_backward) continue;
      os << "  \"" << esc(src) << "\" -> \"" << esc(n.name) << "\";\n";
    }
  }
  os << "}\n";
  return os.str();
}

}  // namespace braid::graph
