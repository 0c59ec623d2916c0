// Element-wise reductions folded in rank order, the rule every backend that reduces on the host follows (the
// in-process and TCP backends; docs/communication.md, "Summation order"): dst[i] = ((src[0][i] op src[1][i]) op ...) op src[n-1][i] in
// the tensor's dtype; Avg divides that sum by n once; integer sums and products wrap; Min/Max propagate the
// first NaN. dst may be one of the sources. Tests compare it with the in-process backend bit for bit.
#pragma once
#include <cstddef>
#include <cstdint>

#include "exec/comm/comm.h"

namespace braid::exec {

void fold(DType t, ReduceOp op, std::byte* dst, const std::byte* const* src, int n, int64_t count);

}  // namespace braid::exec
