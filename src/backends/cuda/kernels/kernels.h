// The CUDA kernel table, beside the op registry (which keeps the CPU kernels): for every op, the kernel that runs
// it on a CUDA device, and the device scratch it needs, keyed by the op's OpDef (never by its name).
// comm_* ops have none: executors run them on a Communicator.
// Tensors handed to a CudaKernel are views of device memory (Tensor::view over a device pointer);
// kernels enqueue work on ctx.stream and return without synchronising.
#pragma once
#include <span>
#include <utility>
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

// What the CUDA backend runs an op with: its kernel, its scratch and which of its inputs a GEMM reads whole.
struct CudaOp {
  CudaKernel fn = nullptr;
  CudaWorkspaceFn workspace = nullptr;  // nullptr: none
  // Bit i: data input i is a GEMM operand read whole (under autocast an activation two such reads share gets one
  // 16-bit copy per slot instead of a cast per GEMM).
  unsigned gemm_inputs = 0;
};

// The table, keyed by the op's definition: filled once, the first time it is asked, from the families' entries
// (kernels_dense.cpp, kernels_spatial.cpp: bound to the registry's OpDefs, each asserted to exist) and from the
// activation list (ops/activation.h: every activation op and its gradient op, found by OpDef::activation). Never
// looked up by a name string.
// The CUDA op of `op`, or nullptr when there is none (comm_* ops, or an op not ported yet: callers report that as
// an error naming the op, never fall back to the CPU silently).
const CudaOp* cuda_op(const OpDef& op);
// Whether the CUDA backend runs `op` on values of dtype `values` (its kernels take f32 and bf16; comm_* ops run on
// NCCL communicators of any dtype).
bool cuda_supports(const OpDef& op, DType values);
// Scratch bytes the CUDA kernel of `op` needs for these operands (0: none).
size_t cuda_workspace_bytes(const OpDef& op, const Attrs& attrs, std::span<const TensorDesc> in,
                            std::span<const TensorDesc> out);
// Autocast scratch (CudaCtx::autocast) one call of any kernel may need: bf16 copies of two GEMM operands,
// each lying within one input, one output or the call's workspace, so the two largest of those, halved.
size_t cuda_autocast_bytes(std::span<const TensorDesc> in, std::span<const TensorDesc> out, size_t workspace);
// Whether a node of op `head` followed by one of op `tail` (attributes tail_attrs) that reads its output is the
// cuBLASLt GELU epilogue's pair: a linear and the tanh-form gelu.
bool cuda_linear_gelu_pair(const OpDef& head, const OpDef& tail, const Attrs& tail_attrs);
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
  unsigned gemm_inputs = 0;   // CudaOp::gemm_inputs
};
// The families' parts of the table (kernels_dense.cpp, kernels_spatial.cpp).
std::vector<Entry> dense_entries();
std::vector<Entry> spatial_entries();
// The activation list's kernels, by row (ops/activation.h): the forward and the gradient op's.
std::vector<std::pair<CudaKernel, CudaKernel>> activation_kernels();
}  // namespace cuda_table

}  // namespace braid::ops
