// Fused CPU kernels: several graph nodes run as one kernel where that saves passes over memory. The executor
// picks them (exec/executor.cpp, "fusion"); each computes exactly the values and bits its nodes would.
#pragma once
#include <span>
#include <string>

#include "core/tensor.h"

namespace braid::ops {
class Attrs;
}

namespace braid::ops::cpu {

// linear(x, W[, b]) -> z, then an activation (relu, gelu, tanh, sigmoid) of z -> y, float32: the activation
// runs as the GEMM's epilogue on each thread's block of z while the block is in that core's cache. z is still
// written (the activation's backward reads it).
void linear_activation(const Attrs& linear_attrs, const std::string& act_op, const Attrs& act_attrs,
                       std::span<const Tensor> in, const Tensor& z, const Tensor& y);

}  // namespace braid::ops::cpu
