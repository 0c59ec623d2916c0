// The op registry: built once, explicitly, from src/ops/op_list.inc (one line per op family); no
// self-registering static objects. Lookup by name; listing for the generic test suites and did-you-mean.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "ops/op_def.h"

namespace braid::ops {

class Registry {
 public:
  static const Registry& get();
  const OpDef* find(const std::string& name) const;
  const OpDef& at(const std::string& name) const;  // asserts that the op exists (internal use)
  std::vector<const OpDef*> all() const;           // sorted by name
  std::vector<std::string> public_names() const;   // ops usable in model files
  void add(OpDef def);

 private:
  std::vector<std::unique_ptr<OpDef>> ops_;
};

}  // namespace braid::ops
