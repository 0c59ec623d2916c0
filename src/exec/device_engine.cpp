// The registry of device engines by device kind (device_engine.h).
#include "exec/device_engine.h"

#include <map>
#include <mutex>

namespace braid::exec {
namespace {

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}

std::map<std::string, DeviceEngineFactory>& registry() {
  static std::map<std::string, DeviceEngineFactory> r;
  return r;
}

}  // namespace

void register_device_engine(const std::string& kind, DeviceEngineFactory factory) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry()[kind] = factory;
}

DeviceEngineFactory device_engine(const std::string& kind) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto it = registry().find(kind);
  return it == registry().end() ? nullptr : it->second;
}

}  // namespace braid::exec
