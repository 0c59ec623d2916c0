// The CUDA kernel table: the families' entries and the activation list's kernels gathered once into a map keyed
// by OpDef (see kernels.h).
#include "backends/cuda/kernels/kernels.h"

#include <algorithm>
#include <map>

#include "ops/registry.h"

namespace braid::ops {
namespace {

const std::map<const OpDef*, CudaOp>& table() {
  static const std::map<const OpDef*, CudaOp> t = [] {
    const Registry& r = Registry::get();
    std::map<const OpDef*, CudaOp> m;
    for (auto part : {cuda_table::dense_entries(), cuda_table::spatial_entries()})
      for (const auto& e : part) {
        const OpDef* d = r.find(e.op);
        BRAID_ASSERT(d != nullptr, "CUDA kernel of ", e.op, ", which the registry lacks");
        BRAID_ASSERT(m.count(d) == 0, "CUDA kernel of ", e.op, " registered twice");
        m[d] = CudaOp{e.fn, e.workspace, e.gemm_inputs};
      }
    const auto act = cuda_table::activation_kernels();
    for (const OpDef* d : r.all())
      if (d->activation >= 0) {
        BRAID_ASSERT(m.count(d) == 0, "CUDA kernel of activation ", d->name, " registered twice");
        const auto& k = act.at(static_cast<size_t>(d->activation));
        m[d] = CudaOp{d->activation_grad ? k.second : k.first, nullptr, 0};
      }
    return m;
  }();
  return t;
}

}  // namespace

const CudaOp* cuda_op(const OpDef& op) {
  auto it = table().find(&op);
  return it == table().end() ? nullptr : &it->second;
}

bool cuda_supports(const OpDef& op, DType values) {
  if (op.collective) return true;
  return cuda_op(op) != nullptr && (values == DType::f32 || values == DType::bf16);
}

size_t cuda_workspace_bytes(const OpDef& op, const Attrs& attrs, std::span<const TensorDesc> in,
                            std::span<const TensorDesc> out) {
  const CudaOp* c = cuda_op(op);
  if (c == nullptr || c->workspace == nullptr) return 0;
  return c->workspace(attrs, in, out);
}

bool cuda_linear_gelu_pair(const OpDef& head, const OpDef& tail, const Attrs& tail_attrs) {
  static const OpDef* linear = &Registry::get().at("linear");
  return &head == linear && tail.activation >= 0 && !tail.activation_grad &&
         activation_of(tail, tail_attrs) == Act::GeluTanh;
}

size_t cuda_autocast_bytes(std::span<const TensorDesc> in, std::span<const TensorDesc> out, size_t workspace) {
  size_t a = 0, b = 0;  // the two largest bf16 copies
  auto consider = [&](size_t bytes) {
    bytes = (bytes + 255) / 256 * 256 + 256;
    if (bytes > a) std::swap(a, bytes);
    if (bytes > b) b = bytes;
  };
  for (const auto& d : in) consider(static_cast<size_t>(d.numel()) * 2);
  for (const auto& d : out) consider(static_cast<size_t>(d.numel()) * 2);
  consider(workspace / 2);
  return a + b;
}

std::vector<std::string> cuda_kernel_names() {
  std::vector<std::string> names;
  for (const auto& [d, e] : table()) names.push_back(d->name);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace braid::ops
