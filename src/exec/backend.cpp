// The registry of backends by device kind, and loading backend modules (backend.h).
#include "exec/backend.h"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>

namespace braid::exec {
namespace {

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}

std::map<std::string, std::unique_ptr<Backend>>& registry() {
  static std::map<std::string, std::unique_ptr<Backend>> r;
  return r;
}

// Loads kind's module once (the handle is kept for the life of the process); "" when its backend registered.
std::string load_backend_module(const std::string& kind) {
  static std::mutex m;
  static std::map<std::string, std::string> tried;  // kind -> the outcome of its one attempt
  std::lock_guard<std::mutex> lock(m);
  if (auto it = tried.find(kind); it != tried.end()) return it->second;
  std::string& why = tried[kind];
  const std::string path = backend_module_path(kind);
  if (!backend_module_present(kind)) {
    why = "this braid has no " + kind + " backend (no module " + path + ")";
    return why;
  }
  void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = ::dlerror();
    why = "cannot load the " + kind + " backend " + path + ": " + (e ? e : "unknown error");
    return why;
  }
  using Init = int (*)(int);
  auto init = reinterpret_cast<Init>(::dlsym(h, "braid_backend_init"));
  if (!init) {
    why = path + " is not a braid backend module (no braid_backend_init)";
    return why;
  }
  if (int rc = init(kBackendAbi); rc != 0) {
    why = path + " is a backend module of another braid (interface " + std::to_string(rc) + ", this braid's " +
          std::to_string(kBackendAbi) + ")";
    return why;
  }
  return why;  // "": registered
}

}  // namespace

void register_backend(const std::string& kind, std::unique_ptr<Backend> b) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry()[kind] = std::move(b);
}

std::string backend_module_path(const std::string& kind) {
  std::string var = "BRAID_" + kind + "_MODULE";
  std::transform(var.begin(), var.end(), var.begin(), [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  if (const char* env = std::getenv(var.c_str()); env && *env) return env;
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::string dir = ec ? std::string(".") : exe.parent_path().string();
  return dir + "/libbraid_" + kind + ".so";
}

bool backend_module_present(const std::string& kind) {
  std::error_code ec;
  return std::filesystem::is_regular_file(backend_module_path(kind), ec);
}

Backend* backend(const std::string& kind, std::string* why_not) {
  {
    std::lock_guard<std::mutex> lock(registry_mutex());
    auto& r = registry();
    if (auto it = r.find(kind); it != r.end()) return it->second.get();
    if (auto b = make_builtin_backend(kind)) return (r[kind] = std::move(b)).get();
  }
  std::string why = load_backend_module(kind);
  std::lock_guard<std::mutex> lock(registry_mutex());
  if (auto it = registry().find(kind); it != registry().end()) return it->second.get();
  if (why_not) *why_not = why.empty() ? "the " + kind + " module registered no backend" : why;
  return nullptr;
}

}  // namespace braid::exec
