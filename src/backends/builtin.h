// The backends built into braid (src/backends/builtin.cpp): exec::make_builtin_backend (exec/backend.h) and the
// planning stand-ins of the kinds whose backends are modules, so that a run is planned without loading one.
#pragma once
#include <string>

#include "exec/backend.h"

namespace braid::exec {

// The run-setup answers of `kind` (Backend's "run setup" block) without loading its module: the kind's planning
// stand-in built into braid, whose answers are its module's (the module's backend derives from the same class) and
// whose other methods must not be called; else the registered backend (exec::backend); nullptr for a kind braid
// does not know.
const Backend* planning_backend(const std::string& kind);
// The CPU backend (src/backends/cpu).
std::unique_ptr<Backend> make_cpu_backend();

}  // namespace braid::exec
