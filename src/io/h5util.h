// Internal helpers around the HDF5 C API, shared by h5file.cpp, checkpoint.cpp and the hdf5 dataset: owning
// handles, the process-wide lock (the Debian/serial HDF5 library is not thread-safe), error text taken from
// HDF5's error stack, atomic file creation and typed dataset reads and writes. Automatic error printing is
// switched off; every failure becomes a UserError that names the file and the object. Not a general HDF5
// wrapper: only what braid's readers and writers need.
#pragma once
#include <hdf5.h>

#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"

namespace braid::io::h5 {

constexpr hid_t kInvalidId = -1;  // HDF5 1.10 has no H5I_INVALID_HID

// Before the first HDF5 call of the process (lock, file_type and native_type call it): no HDF5 shutdown at exit.
void init();

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
// The little-endian file type of a braid dtype (files read the same on every machine); kInvalidId for others.
hid_t file_type(DType t);
// The braid dtype a dataset's file type reads as (integers of up to 32 signed bits as i32, wider as i64;
// floats as f32 or f64); a UserError naming `path` and dataset `name` for anything else.
DType file_dtype(hid_t type, const std::string& path, const std::string& name);

// Chunk dimensions of at most `target` bytes, filled from the innermost axis outwards (so a chunk is one
// contiguous run of the row-major tensor).
std::vector<hsize_t> chunk_dims(const Shape& s, size_t elem, size_t target = size_t{1} << 20);

// ---- writing ------------------------------------------------------------------------------------------------

// How a new file is laid out. Compatible: HDF5's earliest formats (any HDF5 1.8 reader). V110: HDF5 1.10's
// formats, whose object headers, superblock and chunk indexes carry checksums (HDF5 >= 1.10 reads them).
enum class FileFormat { Compatible, V110 };

struct AtomicWrite {
  FileFormat format = FileFormat::Compatible;
  hsize_t userblock = 0;  // bytes HDF5 leaves to the caller at the start of the file: 0 or a power of 2 >= 512
  // Runs on the closed temporary file (its name) before it is synced and renamed, e.g. to fill the userblock.
  std::function<void(const std::string& tmp)> after_close;
};

// Creates `path` atomically: fill(file) writes into a new temporary file in the same folder, which is then
// closed, completed by after_close, fsynced and renamed over `path`, and the folder is fsynced. Any failure
// (thrown by fill or by the steps after it) removes the temporary and leaves a previous `path` as it was.
// Call under lock().
void write_atomically(const std::string& path, const AtomicWrite& how, const std::function<void(hid_t file)>& fill);

// Creates dataset `name` (absolute or relative to `loc`; intermediate groups are created) holding `t`:
// chunked (chunks of about `chunk_bytes`) unless a scalar or empty, uncompressed. Returns it open, so that
// the caller can attach attributes. Errors name `path` and `name`.
Handle write_dataset(hid_t loc, const std::string& path, const std::string& name, const Tensor& t,
                     size_t chunk_bytes = size_t{1} << 20);
// A scalar UTF-8 variable-length string attribute `key` on object `obj` (root group, group or dataset).
void write_string_attr(hid_t obj, const std::string& path, const std::string& key, const std::string& value);

// fsync of a file, or of a folder (`dir`), so that a rename into it is durable. `shown` is the file named in errors.
void fsync_path(const std::string& p, bool dir, const std::string& shown);
// A fresh temporary name beside `path`: ".<name>.tmp-<pid>-<counter>".
std::string temp_name(const std::string& path);

// ---- reading ------------------------------------------------------------------------------------------------

// Opens an existing file for reading (a UserError naming it when it cannot be opened).
Handle open_read_only(const std::string& path);

struct OpenDataset {
  Handle ds, space;
  TensorDesc desc;
};
// Opens dataset `name` (relative to `loc`); `shown` is its name in errors.
OpenDataset open_dataset(hid_t loc, const std::string& path, const std::string& name, const std::string& shown);
// Names of every dataset under `group`, recursively, relative to it ("fc.weight", "fc.weight/exp_avg"),
// in name order (hard links only); `gname` is the group in errors.
std::vector<std::string> dataset_names(hid_t group, const std::string& path, const std::string& gname);
// Reads a whole open dataset into a new tensor.
Tensor read_dataset(const OpenDataset& d, const std::string& path, const std::string& shown);
// Reads the scalar string attribute `key` of `obj` (variable or fixed length) into *out; false when `obj`
// has no such attribute or it is not a scalar string.
bool read_string_attr(hid_t obj, const std::string& path, const std::string& key, std::string* out);

}  // namespace braid::io::h5
