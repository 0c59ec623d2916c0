// HDF5 handle helpers: the process-wide lock, quiet error stack, and errors that name file and object.
#include "io/h5util.h"

namespace braid::io::h5 {

std::unique_lock<std::recursive_mutex> lock() {
  static std::recursive_mutex mu;
  std::unique_lock<std::recursive_mutex> guard(mu);
  // Per thread in thread-safe builds, global otherwise: cheap enough to do on every entry.
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  return guard;
}

std::string last_error() {
  std::string out;
  auto walk = [](unsigned, const H5E_error2_t* e, void* data) -> herr_t {
    auto* s = static_cast<std::string*>(data);
    if (s->empty() && e->desc && *e->desc) *s = e->desc;
    return 0;
  };
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, walk, &out);
  // File-level failures read "unable to open file: name = ..., errno = 2, error message = '...', flags...":
  // the system's message is the useful part.
  const std::string key = "error message = '";
  size_t p = out.find(key);
  if (p != std::string::npos) {
    size_t end = out.find('\'', p + key.size());
    if (end != std::string::npos) return out.substr(p + key.size(), end - p - key.size());
  }
  return out;
}

void fail(const std::string& path, const std::string& what) {
  std::string detail = last_error();
  H5Eclear2(H5E_DEFAULT);
  std::string msg = "HDF5 file '" + path + "': " + what;
  if (!detail.empty()) msg += " (" + detail + ")";
  throw UserError(SourceLoc{}, msg);  // the message names the file: callers may re-locate it
}

Handle checked(hid_t id, Handle::Closer close, const std::string& path, const std::string& what) {
  if (id < 0) fail(path, what);
  return Handle(id, close);
}

hid_t native_type(DType t) {
  switch (t) {
    case DType::f32: return H5T_NATIVE_FLOAT;
    case DType::f64: return H5T_NATIVE_DOUBLE;
    case DType::i32: return H5T_NATIVE_INT32;
    case DType::i64: return H5T_NATIVE_INT64;
    default: return kInvalidId;
  }
}

}  // namespace braid::io::h5
