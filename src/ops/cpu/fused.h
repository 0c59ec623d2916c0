// Fused CPU kernels: several graph nodes run as one kernel where that saves passes over memory. The executor
// picks them (exec/executor.cpp, "fusion"); each computes exactly the values and bits its nodes would.
#pragma once
#include <span>
#include <string>

#include "core/tensor.h"

namespace braid::ops {
class Attrs;
struct OpDef;
}

namespace braid::ops::cpu {

// linear(x, W[, b]) -> z, then an activation (relu, gelu, tanh, sigmoid) of z -> y, float32: the activation
// runs as the GEMM's epilogue on each thread's block of z while the block is in that core's cache. z is still
// written (the activation's backward reads it).
void linear_activation(const Attrs& linear_attrs, const std::string& act_op, const Attrs& act_attrs,
                       std::span<const Tensor> in, const Tensor& z, const Tensor& y);

// linear_dw(dy, x) -> dW and linear_db(dy) -> db, float32: db's column sums of dy run in the dW GEMM's
// epilogue, each thread summing the columns of dy that are its rows of dW (no parallel region of their own).
// The same bits as the two kernels: dW is the same GEMM, db sums rows in order into double accumulators.
void linear_dw_db(std::span<const Tensor> dw_in, const Tensor& dw, const Tensor& db);

// The CPU backend's fusions, looked up by the ops of two adjacent nodes (head, then tail): the executor asks, and
// never compares op names. `link` is how the tail must be wired to the head for the pair to fuse; `run` computes
// both nodes' first outputs from the head's inputs (float32 only), with exactly the unfused bits.
enum class FusionLink {
  TailReadsHeadOutput,  // the tail's first input is the head's first output (linear + its activation)
  SameFirstInput,       // the tail's only input is the head's first input (linear_dw + linear_db of one dy)
};
struct CpuFusion {
  FusionLink link;
  void (*run)(const Attrs& head_attrs, const OpDef& tail, const Attrs& tail_attrs, std::span<const Tensor> head_in,
              const Tensor& head_out, const Tensor& tail_out);
};
const CpuFusion* cpu_fusion(const OpDef& head, const OpDef& tail);  // nullptr: the pair does not fuse

}  // namespace braid::ops::cpu
