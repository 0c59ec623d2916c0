// The CUDA kernel table: the families' entries gathered once into a map by op name (see kernels.h).
#include "backends/cuda/kernels/kernels.h"

#include <algorithm>
#include <map>

namespace braid::ops {
namespace {

const std::map<std::string, cuda_table::Entry>& table() {
  static const std::map<std::string, cuda_table::Entry> t = [] {
    std::map<std::string, cuda_table::Entry> m;
    for (auto part : {cuda_table::dense_entries(), cuda_table::spatial_entries()})
      for (const auto& e : part) {
        BRAID_ASSERT(m.count(e.op) == 0, "CUDA kernel of ", e.op, " registered twice");
        m[e.op] = e;
      }
    return m;
  }();
  return t;
}

}  // namespace

const CudaKernel* cuda_kernel(const std::string& op) {
  auto it = table().find(op);
  return it == table().end() ? nullptr : &it->second.fn;
}

size_t cuda_workspace_bytes(const std::string& op, const Attrs& attrs, std::span<const TensorDesc> in,
                            std::span<const TensorDesc> out) {
  auto it = table().find(op);
  if (it == table().end() || it->second.workspace == nullptr) return 0;
  return it->second.workspace(attrs, in, out);
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
  for (const auto& [name, e] : table()) names.push_back(name);
  return names;
}

}  // namespace braid::ops
