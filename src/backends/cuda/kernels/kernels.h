// The CUDA kernel table, beside the op registry (which keeps the CPU kernels): for every op name, the
// kernel that runs it on a CUDA device, and the device scratch it needs. Looked up by name, never
// switched on by central code. comm_* ops have none: executors run them on a Communicator.
// Tensors handed to a CudaKernel are views of device memory (Tensor::view over a device pointer);
// kernels enqueue work on ctx.stream and return without synchronising.
#pragma once
#include <span>
#include <string>
#include <vector>

#include "backends/cuda/kernels/launch.h"
#include "ops/op_def.h"

namespace braid::ops {

using CudaCtx = cuda::Ctx;
using CudaKernel = void (*)(const CudaCtx& ctx, const Attrs& attrs, std::span<const Tensor> in,
                            std::span<const Tensor> out);
// Device scratch in bytes for one call (ctx.workspace), from the call's descriptions.
using CudaWorkspaceFn = size_t (*)(const Attrs&, std::span<const TensorDesc> in, std::span<const TensorDesc> out);

// The CUDA kernel of `op`, or nullptr when there is none (comm_* ops, or an op not ported yet: callers
// report that as an error naming the op, never fall back to the CPU silently).
const CudaKernel* cuda_kernel(const std::string& op);
// Scratch bytes the CUDA kernel of `op` needs for these operands (0: none).
size_t cuda_workspace_bytes(const std::string& op, const Attrs& attrs, std::span<const TensorDesc> in,
                            std::span<const TensorDesc> out);
// Autocast scratch (CudaCtx::autocast) one call of any kernel may need: bf16 copies of two GEMM operands,
// each lying within one input, one output or the call's workspace, so the two largest of those, halved.
size_t cuda_autocast_bytes(std::span<const TensorDesc> in, std::span<const TensorDesc> out, size_t workspace);
// A `linear` node (inputs lin_in: x, weight, bias) and the tanh-form `gelu` of its output in one cuBLASLt call:
// h = the linear's output, y = the gelu's. False, having done nothing, where it does not apply (no bias, no
// autocast, no cuBLASLt algorithm): the executor then runs the two nodes apart.
bool cuda_linear_gelu(const CudaCtx& c, std::span<const Tensor> lin_in, const Tensor& h, const Tensor& y);
// Every op name that has a CUDA kernel (sorted).
std::vector<std::string> cuda_kernel_names();

namespace cuda_table {
struct Entry {
  const char* op;
  CudaKernel fn;
  CudaWorkspaceFn workspace;  // nullptr: none
};
// The families' parts of the table (kernels_dense.cpp, kernels_spatial.cpp).
std::vector<Entry> dense_entries();
std::vector<Entry> spatial_entries();
}  // namespace cuda_table

}  // namespace braid::ops
