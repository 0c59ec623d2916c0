// Element-wise reductions folded in rank order, the TCP backend's copy of the in-process backend's rule
// (docs/communication.md, "Summation order"): dst[i] = ((src[0][i] op src[1][i]) op ...) op src[n-1][i] in
// the tensor's dtype; Avg divides that sum by n once; integer sums and products wrap; Min/Max propagate the
// first NaN. dst may be one of the sources. Tests compare it with the in-process backend bit for bit.
#pragma once
#include <cstddef>
#include <cstdint>

#include "exec/comm/comm.h"

namespace braid::dist {

void fold(DType t, exec::ReduceOp op, std::byte* dst, const std::byte* const* src, int n, int64_t count);

}  // namespace braid::dist
