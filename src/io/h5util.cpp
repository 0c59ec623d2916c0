// HDF5 helpers: the process-wide lock, quiet error stack, errors that name file and object, atomic file
// creation (temporary file, fsync, rename, fsync of the folder) and typed dataset reads and writes.
#include "io/h5util.h"

#include "core/resource_error.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace braid::io::h5 {

void init() {
  // No library shutdown at exit (asked before the first HDF5 call): if an H5Fclose ever fails (a full disk)
  // HDF5 1.10.8 keeps a half-closed file and crashes closing it again when the process exits. braid closes
  // every file it opens, so the shutdown has nothing to flush.
  static const bool no_atexit = H5dont_atexit() >= 0;
  (void)no_atexit;
}

std::unique_lock<std::recursive_mutex> lock() {
  init();
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
  if (says_disk_full(detail)) throw ResourceError(msg);  // a write that met a full disk: exit 1, not 2
  throw UserError(SourceLoc{}, msg);  // the message names the file: callers may re-locate it
}

Handle checked(hid_t id, Handle::Closer close, const std::string& path, const std::string& what) {
  if (id < 0) fail(path, what);
  return Handle(id, close);
}

hid_t native_type(DType t) {
  init();
  switch (t) {
    case DType::f32: return H5T_NATIVE_FLOAT;
    case DType::f64: return H5T_NATIVE_DOUBLE;
    case DType::i32: return H5T_NATIVE_INT32;
    case DType::i64: return H5T_NATIVE_INT64;
    default: return kInvalidId;
  }
}

hid_t file_type(DType t) {
  init();
  switch (t) {
    case DType::f32: return H5T_IEEE_F32LE;
    case DType::f64: return H5T_IEEE_F64LE;
    case DType::i32: return H5T_STD_I32LE;
    case DType::i64: return H5T_STD_I64LE;
    default: return kInvalidId;
  }
}

namespace {
[[noreturn]] void bad(const std::string& path, const std::string& msg) {
  throw UserError(SourceLoc{}, "HDF5 file '" + path + "': " + msg);
}
}  // namespace

DType file_dtype(hid_t type, const std::string& path, const std::string& name) {
  H5T_class_t cls = H5Tget_class(type);
  size_t size = H5Tget_size(type);
  if (cls == H5T_FLOAT) {
    if (size == 4) return DType::f32;
    if (size == 8) return DType::f64;
    bad(path, "dataset '" + name + "' holds " + std::to_string(size * 8) + "-bit floats (32 or 64 only)");
  }
  if (cls == H5T_INTEGER) {
    bool is_signed = H5Tget_sign(type) == H5T_SGN_2;
    if (size < 4 || (size == 4 && is_signed)) return DType::i32;
    if (size == 4 || (size == 8 && is_signed)) return DType::i64;
    bad(path, "dataset '" + name + "' holds unsigned 64-bit integers, which do not fit i64");
  }
  bad(path, "dataset '" + name + "' does not hold numbers (integers or floats)");
}

std::vector<hsize_t> chunk_dims(const Shape& s, size_t elem, size_t target) {
  std::vector<hsize_t> chunk(static_cast<size_t>(s.rank()));
  size_t inner = elem;
  for (int a = s.rank() - 1; a >= 0; --a) {
    size_t fit = std::max<size_t>(1, target / inner);
    chunk[static_cast<size_t>(a)] = static_cast<hsize_t>(std::min<size_t>(static_cast<size_t>(s[a]), fit));
    inner *= chunk[static_cast<size_t>(a)];
  }
  return chunk;
}

void fsync_path(const std::string& p, bool dir, const std::string& shown) {
  int fd = ::open(p.c_str(), dir ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0) bad(shown, "cannot open '" + p + "' to sync it: " + std::strerror(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0)
    throw_os_error(err, SourceLoc{}, "HDF5 file '" + shown + "': cannot sync '" + p + "': " + std::strerror(err));
}

std::string temp_name(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  std::filesystem::path p(path);
  std::string base = "." + p.filename().string() + ".tmp-" + std::to_string(::getpid()) + "-" +
                     std::to_string(counter.fetch_add(1));
  return (p.parent_path() / base).string();
}

namespace {
// Reserves (fallocate, size unchanged) the blocks up to the end of the space HDF5 has allocated in `f`, plus
// a margin, so that the metadata H5Fclose writes cannot meet a full disk. A full disk or quota is an error
// here; a file system without fallocate is left to the close.
void reserve_for_close(hid_t f, const std::string& tmp, const std::string& path, hsize_t userblock) {
  haddr_t eoa = 0;
  hsize_t size = 0;
  int* fd = nullptr;
  if (H5Fget_eoa(f, &eoa) < 0 || H5Fget_filesize(f, &size) < 0 ||
      H5Fget_vfd_handle(f, H5P_DEFAULT, reinterpret_cast<void**>(&fd)) < 0 || fd == nullptr) {
    H5Eclear2(H5E_DEFAULT);
    return;
  }
  const hsize_t end = std::max<hsize_t>(eoa + userblock, size);
  const off_t len = static_cast<off_t>(end + end / 1000 + (hsize_t{64} << 10));
  if (::fallocate(*fd, FALLOC_FL_KEEP_SIZE, 0, len) != 0 && is_resource_errno(errno) && errno != EIO)
    throw ResourceError("HDF5 file '" + path + "': cannot write '" + tmp + "': " + std::strerror(errno));
}
}  // namespace

void write_atomically(const std::string& path, const AtomicWrite& how, const std::function<void(hid_t file)>& fill) {
  const std::string tmp = temp_name(path);
  try {
    Handle fapl = plist(H5Pcreate(H5P_FILE_ACCESS), path, "cannot create file access list");
    if (H5Pset_fclose_degree(fapl.get(), H5F_CLOSE_STRONG) < 0) fail(path, "cannot set close degree");
    if (how.format == FileFormat::V110 && H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V110, H5F_LIBVER_V110) < 0)
      fail(path, "cannot select the HDF5 1.10 file format");
    Handle fcpl = plist(H5Pcreate(H5P_FILE_CREATE), path, "cannot create file creation list");
    if (how.userblock > 0 && H5Pset_userblock(fcpl.get(), how.userblock) < 0) fail(path, "cannot reserve a user block");
    const hid_t f = H5Fcreate(tmp.c_str(), H5F_ACC_EXCL, fcpl.get(), fapl.get());
    if (f < 0) fail(path, "cannot create temporary file '" + tmp + "'");
    // A close that fails (its metadata flush hitting a full disk) leaves HDF5 1.10.8 with a half-closed file
    // that crashes it when closed again, and a failed H5Fflush breaks the close after it. So the space the
    // close will write is reserved first (a full disk fails there, inside `fill`'s error path), and after a
    // failure the temporary is emptied before the one close, which then has the space the data took.
    auto close_after_failure = [&] {
      if (::truncate(tmp.c_str(), 0) != 0) {
        // Nothing more to free; the close below may fail, and the file is removed anyway.
      }
      H5Fclose(f);
      H5Eclear2(H5E_DEFAULT);
    };
    try {
      fill(f);
      reserve_for_close(f, tmp, path, how.userblock);
    } catch (...) {
      close_after_failure();
      throw;
    }
    if (H5Fclose(f) < 0) {  // rare once reserved; the file stays open inside HDF5 (never closed twice)
      std::string detail = last_error();
      H5Eclear2(H5E_DEFAULT);
      const std::string msg = "cannot finish writing '" + tmp + "'" + (detail.empty() ? "" : " (" + detail + ")");
      if (says_disk_full(detail)) throw ResourceError("HDF5 file '" + path + "': " + msg);
      bad(path, msg);
    }
    if (how.after_close) how.after_close(tmp);
    fsync_path(tmp, false, path);
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
      const int err = errno;
      throw_os_error(err, SourceLoc{}, "HDF5 file '" + path + "': cannot rename '" + tmp + "' over it: " + std::strerror(err));
    }
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    throw;
  }
  std::string dir = std::filesystem::path(path).parent_path().string();
  fsync_path(dir.empty() ? "." : dir, true, path);
}

Handle write_dataset(hid_t loc, const std::string& path, const std::string& name, const Tensor& t,
                     size_t chunk_bytes) {
  const std::string what = "cannot write dataset '" + name + "'";
  std::vector<hsize_t> dims(t.shape().dims().begin(), t.shape().dims().end());
  Handle sp = t.shape().rank() == 0 ? space(H5Screate(H5S_SCALAR), path, what)
                                    : space(H5Screate_simple(t.shape().rank(), dims.data(), nullptr), path, what);
  Handle lcpl = plist(H5Pcreate(H5P_LINK_CREATE), path, what);
  if (H5Pset_create_intermediate_group(lcpl.get(), 1) < 0) fail(path, what);
  Handle dcpl = plist(H5Pcreate(H5P_DATASET_CREATE), path, what);
  // Scalars and empty tensors cannot be chunked; they are stored contiguously. (H5D_FILL_TIME_NEVER is not
  // set: with HDF5 1.10.8 a dataset of a single chunk larger than the chunk cache then reads back as zeros.)
  if (t.shape().rank() > 0 && t.numel() > 0) {
    std::vector<hsize_t> chunk = chunk_dims(t.shape(), dtype_size(t.dtype()), chunk_bytes);
    if (H5Pset_chunk(dcpl.get(), t.shape().rank(), chunk.data()) < 0) fail(path, what);
  }
  Handle ds = dataset(H5Dcreate2(loc, name.c_str(), file_type(t.dtype()), sp.get(), lcpl.get(), dcpl.get(), H5P_DEFAULT),
                      path, what);
  if (t.numel() > 0 && H5Dwrite(ds.get(), native_type(t.dtype()), H5S_ALL, H5S_ALL, H5P_DEFAULT, t.raw()) < 0)
    fail(path, what);
  return ds;
}

void write_string_attr(hid_t obj, const std::string& path, const std::string& key, const std::string& value) {
  const std::string what = "cannot write attribute '" + key + "'";
  Handle ty = type(H5Tcopy(H5T_C_S1), path, what);
  if (H5Tset_size(ty.get(), H5T_VARIABLE) < 0 || H5Tset_cset(ty.get(), H5T_CSET_UTF8) < 0) fail(path, what);
  Handle sp = space(H5Screate(H5S_SCALAR), path, what);
  Handle a = attr(H5Acreate2(obj, key.c_str(), ty.get(), sp.get(), H5P_DEFAULT, H5P_DEFAULT), path, what);
  const char* s = value.c_str();
  if (H5Awrite(a.get(), ty.get(), &s) < 0) fail(path, what);
}

Handle open_read_only(const std::string& path) {
  return file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), path, "cannot open for reading");
}

OpenDataset open_dataset(hid_t loc, const std::string& path, const std::string& name, const std::string& shown) {
  const std::string what = "cannot read dataset '" + shown + "'";
  OpenDataset d;
  d.ds = dataset(H5Dopen2(loc, name.c_str(), H5P_DEFAULT), path, what);
  d.space = space(H5Dget_space(d.ds.get()), path, what);
  Handle ty = type(H5Dget_type(d.ds.get()), path, what);
  d.desc.dtype = file_dtype(ty.get(), path, shown);
  int rank = H5Sget_simple_extent_ndims(d.space.get());
  if (rank < 0) fail(path, what);
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  if (rank > 0 && H5Sget_simple_extent_dims(d.space.get(), dims.data(), nullptr) < 0) fail(path, what);
  d.desc.shape = Shape(std::vector<int64_t>(dims.begin(), dims.end()));
  return d;
}

Tensor read_dataset(const OpenDataset& d, const std::string& path, const std::string& shown) {
  Tensor t = Tensor::empty(d.desc);
  if (t.numel() > 0 && H5Dread(d.ds.get(), native_type(t.dtype()), H5S_ALL, H5S_ALL, H5P_DEFAULT, t.raw()) < 0)
    fail(path, "cannot read dataset '" + shown + "'");
  return t;
}

// Relative names of the datasets under `group`, in name order (hard links only).
std::vector<std::string> dataset_names(hid_t group, const std::string& path, const std::string& gname) {
  std::vector<std::string> names;
  auto visit = [](hid_t g, const char* name, const H5L_info_t* info, void* data) -> herr_t {
    if (info->type != H5L_TYPE_HARD) return 0;
    hid_t obj = H5Oopen(g, name, H5P_DEFAULT);
    if (obj < 0) return -1;
    bool is_ds = H5Iget_type(obj) == H5I_DATASET;
    H5Oclose(obj);
    if (is_ds) static_cast<std::vector<std::string>*>(data)->push_back(name);
    return 0;
  };
  if (H5Lvisit(group, H5_INDEX_NAME, H5_ITER_INC, visit, &names) < 0)
    h5::fail(path, "cannot list the datasets of group '" + gname + "'");
  return names;
}

bool read_string_attr(hid_t obj, const std::string& path, const std::string& key, std::string* out) {
  const std::string what = "cannot read attribute '" + key + "'";
  htri_t exists = H5Aexists(obj, key.c_str());
  if (exists < 0) fail(path, what);
  if (exists == 0) return false;
  Handle a = attr(H5Aopen(obj, key.c_str(), H5P_DEFAULT), path, what);
  Handle ftype = type(H5Aget_type(a.get()), path, what);
  Handle sp = space(H5Aget_space(a.get()), path, what);
  if (H5Tget_class(ftype.get()) != H5T_STRING || H5Sget_simple_extent_type(sp.get()) != H5S_SCALAR) return false;
  Handle mtype = type(H5Tcopy(H5T_C_S1), path, what);
  if (H5Tset_cset(mtype.get(), H5Tget_cset(ftype.get())) < 0) fail(path, what);
  if (H5Tis_variable_str(ftype.get()) > 0) {
    if (H5Tset_size(mtype.get(), H5T_VARIABLE) < 0) fail(path, what);
    char* s = nullptr;
    if (H5Aread(a.get(), mtype.get(), &s) < 0) fail(path, what);
    *out = s ? s : "";
    H5free_memory(s);
  } else {
    size_t n = H5Tget_size(ftype.get());
    if (H5Tset_size(mtype.get(), n + 1) < 0 || H5Tset_strpad(mtype.get(), H5T_STR_NULLTERM) < 0) fail(path, what);
    std::string buf(n + 1, '\0');
    if (H5Aread(a.get(), mtype.get(), buf.data()) < 0) fail(path, what);
    *out = buf.c_str();
  }
  return true;
}

}  // namespace braid::io::h5
