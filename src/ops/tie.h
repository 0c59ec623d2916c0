// Parameter tying (MODEL_FORMAT.md, linear's `tie: LAYER`): a layer whose op has a tie rule and whose String
// attribute `tie` names another layer uses that layer's parameter `param` instead of creating its own. One
// parameter, kept under the named layer's name; autodiff sums the gradients of its uses. The rule lives in the
// op's file; the graph builder (graph/build.cpp) resolves the name and reports every mistake at the tying layer.
#pragma once
#include <span>

#include "ops/op_def.h"

namespace braid::ops {

struct TieRule {
  const char* param;  // the local name of the parameter taken from the named layer ("weight")
  // Before the op's ParamsFn: fills the attributes the tied parameter decides (linear's `out`) and checks the
  // layer's attributes and data inputs against it (`tied`: the named layer's parameter); throws OpError.
  void (*check)(Attrs& attrs, std::span<const TensorDesc> data, const TensorDesc& tied);
};

// The tie rule of `op`, or nullptr when the op cannot tie (its `tie` attribute, if any, is then an error).
const TieRule* tie_rule(const OpDef& op);

}  // namespace braid::ops
