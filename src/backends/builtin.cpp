// The backends built into braid, by device kind (builtin.h): the CPU's, and the planning stand-ins of the kinds
// whose backends are modules loaded at run time. The one place outside the modules and the device-string grammar
// (planner::parse_devices) where a kind's name meets its code.
#include "backends/builtin.h"

#include <map>
#include <memory>
#include <mutex>

#include "backends/cuda_planning.h"

namespace braid::exec {

std::unique_ptr<Backend> make_builtin_backend(const std::string& kind) {
  return kind == "cpu" ? make_cpu_backend() : nullptr;
}

const Backend* planning_backend(const std::string& kind) {
  static std::mutex m;
  static std::map<std::string, std::unique_ptr<Backend>> stand_ins;
  {
    std::lock_guard<std::mutex> lock(m);
    auto& b = stand_ins[kind];
    if (!b && kind == "cuda") b = make_cuda_planning_stand_in();
    if (b) return b.get();
  }
  return backend(kind);
}

}  // namespace braid::exec
