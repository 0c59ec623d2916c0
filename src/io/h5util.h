// Internal helpers around the HDF5 C API, shared by h5file.cpp and the hdf5 dataset: owning handles,
// the process-wide lock (the Debian/serial HDF5 library is not thread-safe), and error text taken from
// HDF5's error stack. Automatic error printing is switched off; every failure becomes a UserError that
// names the file and the object. Not a general HDF5 wrapper: only what braid's readers and writers need.
#pragma once
#include <hdf5.h>

#include <mutex>
#include <string>
#include <utility>

#include "core/error.h"
#include "core/tensor.h"

namespace braid::io::h5 {

constexpr hid_t kInvalidId = -1;  // HDF5 1.10 has no H5I_INVALID_HID

// Serialises every HDF5 call in the process; also silences HDF5's automatic error printing (once).
std::unique_lock<std::recursive_mutex> lock();

// The most specific message on HDF5's current error stack ("" when empty).
std::string last_error();

// A failure of `what` (e.g. "cannot open dataset '/x'") in file `path`, with HDF5's own message appended.
[[noreturn]] void fail(const std::string& path, const std::string& what);

// Owns an hid_t and closes it with the matching H5*close.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer close) : id_(id), close_(close) {}
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  Handle(Handle&& o) noexcept : id_(std::exchange(o.id_, kInvalidId)), close_(o.close_) {}
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, kInvalidId);
      close_ = o.close_;
    }
    return *this;
  }
  ~Handle() { reset(); }
  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  // Closes now; returns false when the close itself failed (a failed flush on H5Fclose).
  bool close() {
    if (id_ < 0) return true;
    herr_t rc = close_(std::exchange(id_, kInvalidId));
    return rc >= 0;
  }

 private:
  void reset() {
    if (id_ >= 0) close_(std::exchange(id_, kInvalidId));
  }
  hid_t id_ = kInvalidId;
  Closer close_ = nullptr;
};

// Checked constructors: throw through fail(path, what) when HDF5 returns an invalid id.
Handle checked(hid_t id, Handle::Closer close, const std::string& path, const std::string& what);
inline Handle file(hid_t id, const std::string& path, const std::string& what) {
  return checked(id, H5Fclose, path, what);
}
inline Handle dataset(hid_t id, const std::string& path, const std::string& what) {
  return checked(id, H5Dclose, path, what);
}
inline Handle space(hid_t id, const std::string& path, const std::string& what) {
  return checked(id, H5Sclose, path, what);
}
inline Handle type(hid_t id, const std::string& path, const std::string& what) {
  return checked(id, H5Tclose, path, what);
}
inline Handle plist(hid_t id, const std::string& path, const std::string& what) {
  return checked(id, H5Pclose, path, what);
}
inline Handle attr(hid_t id, const std::string& path, const std::string& what) {
  return checked(id, H5Aclose, path, what);
}
inline Handle group(hid_t id, const std::string& path, const std::string& what) {
  return checked(id, H5Gclose, path, what);
}

// The native memory type of a braid dtype (f32, f64, i32, i64); bf16 and f16 have none.
hid_t native_type(DType t);

}  // namespace braid::io::h5
