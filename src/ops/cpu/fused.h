// Fused CPU kernels: several graph nodes run as one kernel where that saves passes over memory. The executor
// picks them (backends/cpu/executor.cpp, "fusion"); each computes exactly the values and bits its nodes would.
#pragma once
#include <span>
#include <string>

#include "core/tensor.h"
#include "ops/activation.h"

namespace braid::ops {
class Attrs;
struct OpDef;
struct KernelCtx;
}

namespace braid::ops::cpu {

// linear(x, W[, b]) -> z, then an activation (relu, gelu, tanh, sigmoid) of z -> y, float32: the activation
// runs as the GEMM's epilogue on each thread's block of z while the block is in that core's cache. z is still
// written (gelu's backward reads it); y may be z's bytes (relu in place), rewritten block by block.
void linear_activation(const Attrs& linear_attrs, Act act, std::span<const Tensor> in, const Tensor& z, const Tensor& y);

// linear_dw(dy, x) -> dW and linear_db(dy) -> db, float32: db's column sums of dy run in the dW GEMM's
// epilogue, each thread summing the columns of dy that are its rows of dW (no parallel region of their own).
// The same bits as the two kernels: dW is the same GEMM, db sums rows in order into double accumulators.
void linear_dw_db(std::span<const Tensor> dw_in, const Tensor& dw, const Tensor& db);

// linear_dx(dy, W) -> dh, then an activation's gradient <act>_grad(dh, z) -> dz, float32: the activation's
// derivative runs as the dx GEMM's epilogue on each block of dh while it is in cache (dz may be dh's bytes: the
// memory plan's in-place gradient). dh is written too where it is not dz.
void linear_dx_activation_grad(Act act, std::span<const Tensor> dx_in, const Tensor& dh, const Tensor& z, const Tensor& dz);

// conv2d(x, W[, b]) -> z, then an activation of z -> y, float32: on oneDNN's convolution the activation runs on each
// chunk of samples right after the chunk's convolution wrote it, on the same thread, while it is in that core's
// cache; on im2col, after the convolution. z is still written (gelu's gradient reads it); y may be z's bytes (relu
// runs in place where z dies at it, its gradient reading y).
void conv2d_activation(const KernelCtx& ctx, const Attrs& conv_attrs, Act act, std::span<const Tensor> in,
                       const Tensor& z, const Tensor& y);

// The CPU backend's fusions, looked up by the ops of two adjacent nodes (head, then tail) in a table keyed by their
// OpDefs, filled once from the registry (every activation of ops/activation.h after linear and conv2d, every
// activation gradient after linear_dx): the executor asks, and never compares op names. `link` is how the tail must be wired to the head for the pair to fuse; `run` computes
// both nodes' first outputs from the head's inputs and the tail's (float32 only), with exactly the unfused bits.
enum class FusionLink {
  TailReadsHeadOutput,  // the tail's first input is the head's first output (linear + its activation, linear_dx +
                        // the activation's gradient)
  SameFirstInput,       // the tail's only input is the head's first input (linear_dw + linear_db of one dy)
};
struct CpuFusion {
  FusionLink link;
  void (*run)(const KernelCtx& ctx, const Attrs& head_attrs, const OpDef& tail, const Attrs& tail_attrs, std::span<const Tensor> head_in,
              std::span<const Tensor> tail_in, const Tensor& head_out, const Tensor& tail_out);
};
const CpuFusion* cpu_fusion(const OpDef& head, const OpDef& tail);  // nullptr: the pair does not fuse

}  // namespace braid::ops::cpu
