// HDF5 tensor files: atomic writes (temp file, fsync, rename, fsync folder) and typed reads.
// Every HDF5 call runs under h5::lock() and is checked; errors name the file and the dataset.
#include "io/h5file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include "io/h5util.h"

namespace braid::io {

namespace fs = std::filesystem;

namespace {

[[noreturn]] void bad_call(const std::string& path, const std::string& msg) {
  throw UserError(SourceLoc{}, "HDF5 file '" + path + "': " + msg);
}

// Little-endian file types, so files read the same on every machine.
hid_t file_type(DType t) {
  switch (t) {
    case DType::f32: return H5T_IEEE_F32LE;
    case DType::f64: return H5T_IEEE_F64LE;
    case DType::i32: return H5T_STD_I32LE;
    case DType::i64: return H5T_STD_I64LE;
    default: return h5::kInvalidId;
  }
}

// Chunks of at most ~1 MiB, filled from the innermost axis outwards.
std::vector<hsize_t> chunk_dims(const Shape& s, size_t elem) {
  constexpr size_t kTarget = 1u << 20;
  std::vector<hsize_t> chunk(static_cast<size_t>(s.rank()));
  size_t inner = elem;
  for (int a = s.rank() - 1; a >= 0; --a) {
    size_t fit = std::max<size_t>(1, kTarget / inner);
    chunk[static_cast<size_t>(a)] = static_cast<hsize_t>(std::min<size_t>(static_cast<size_t>(s[a]), fit));
    inner *= chunk[static_cast<size_t>(a)];
  }
  return chunk;
}

void check_names(const std::string& path, const NamedTensors& tensors) {
  std::set<std::string> seen;
  for (const auto& [name, t] : tensors) {
    bool ok = name.size() > 1 && name[0] == '/' && name.back() != '/' && name.find("//") == std::string::npos;
    if (!ok) bad_call(path, "dataset name '" + name + "' must be an absolute HDF5 path such as '/params/fc.weight'");
    if (!seen.insert(name).second) bad_call(path, "dataset '" + name + "' is written twice");
    if (file_type(t.dtype()) < 0)
      bad_call(path, "dataset '" + name + "': cannot store " + std::string(dtype_name(t.dtype())) +
                         " tensors (f32, f64, i32 and i64 only)");
    if (!t.defined()) bad_call(path, "dataset '" + name + "': tensor has no data");
  }
}

void write_dataset(hid_t file, const std::string& path, const std::string& name, const Tensor& t) {
  const std::string what = "cannot write dataset '" + name + "'";
  std::vector<hsize_t> dims(t.shape().dims().begin(), t.shape().dims().end());
  h5::Handle space = t.shape().rank() == 0 ? h5::space(H5Screate(H5S_SCALAR), path, what)
                                           : h5::space(H5Screate_simple(t.shape().rank(), dims.data(), nullptr), path, what);
  h5::Handle lcpl = h5::plist(H5Pcreate(H5P_LINK_CREATE), path, what);
  if (H5Pset_create_intermediate_group(lcpl.get(), 1) < 0) h5::fail(path, what);
  h5::Handle dcpl = h5::plist(H5Pcreate(H5P_DATASET_CREATE), path, what);
  // Scalars and empty tensors cannot be chunked; they are stored contiguously.
  if (t.shape().rank() > 0 && t.numel() > 0) {
    std::vector<hsize_t> chunk = chunk_dims(t.shape(), dtype_size(t.dtype()));
    if (H5Pset_chunk(dcpl.get(), t.shape().rank(), chunk.data()) < 0) h5::fail(path, what);
  }
  h5::Handle ds = h5::dataset(
      H5Dcreate2(file, name.c_str(), file_type(t.dtype()), space.get(), lcpl.get(), dcpl.get(), H5P_DEFAULT), path,
      what);
  if (t.numel() > 0 &&
      H5Dwrite(ds.get(), h5::native_type(t.dtype()), H5S_ALL, H5S_ALL, H5P_DEFAULT, t.raw()) < 0)
    h5::fail(path, what);
  if (!ds.close()) h5::fail(path, what);
}

void write_string_attr(hid_t file, const std::string& path, const std::string& key, const std::string& value) {
  const std::string what = "cannot write attribute '" + key + "'";
  h5::Handle type = h5::type(H5Tcopy(H5T_C_S1), path, what);
  if (H5Tset_size(type.get(), H5T_VARIABLE) < 0 || H5Tset_cset(type.get(), H5T_CSET_UTF8) < 0) h5::fail(path, what);
  h5::Handle space = h5::space(H5Screate(H5S_SCALAR), path, what);
  h5::Handle attr = h5::attr(H5Acreate2(file, key.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), path, what);
  const char* s = value.c_str();
  if (H5Awrite(attr.get(), type.get(), &s) < 0) h5::fail(path, what);
}

void fsync_path(const std::string& p, bool dir, const std::string& path) {
  int fd = ::open(p.c_str(), dir ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0) bad_call(path, "cannot open '" + p + "' to sync it: " + std::strerror(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) bad_call(path, "cannot sync '" + p + "': " + std::strerror(err));
}

std::string temp_name(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  fs::path p(path);
  std::string base = "." + p.filename().string() + ".tmp-" + std::to_string(::getpid()) + "-" +
                     std::to_string(counter.fetch_add(1));
  return (p.parent_path() / base).string();
}

DType file_dtype(hid_t type, const std::string& path, const std::string& name) {
  H5T_class_t cls = H5Tget_class(type);
  size_t size = H5Tget_size(type);
  if (cls == H5T_FLOAT) {
    if (size == 4) return DType::f32;
    if (size == 8) return DType::f64;
    bad_call(path, "dataset '" + name + "' holds " + std::to_string(size * 8) + "-bit floats (32 or 64 only)");
  }
  if (cls == H5T_INTEGER) {
    bool is_signed = H5Tget_sign(type) == H5T_SGN_2;
    if (size < 4 || (size == 4 && is_signed)) return DType::i32;
    if (size == 4 || (size == 8 && is_signed)) return DType::i64;
    bad_call(path, "dataset '" + name + "' holds unsigned 64-bit integers, which do not fit i64");
  }
  bad_call(path, "dataset '" + name + "' does not hold numbers (integers or floats)");
}

struct OpenDataset {
  h5::Handle ds, space;
  TensorDesc desc;
};

OpenDataset open_dataset(hid_t loc, const std::string& path, const std::string& name, const std::string& shown) {
  const std::string what = "cannot read dataset '" + shown + "'";
  OpenDataset d;
  d.ds = h5::dataset(H5Dopen2(loc, name.c_str(), H5P_DEFAULT), path, what);
  d.space = h5::space(H5Dget_space(d.ds.get()), path, what);
  h5::Handle type = h5::type(H5Dget_type(d.ds.get()), path, what);
  d.desc.dtype = file_dtype(type.get(), path, shown);
  int rank = H5Sget_simple_extent_ndims(d.space.get());
  if (rank < 0) h5::fail(path, what);
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  if (rank > 0 && H5Sget_simple_extent_dims(d.space.get(), dims.data(), nullptr) < 0) h5::fail(path, what);
  d.desc.shape = Shape(std::vector<int64_t>(dims.begin(), dims.end()));
  return d;
}

Tensor read_open(const OpenDataset& d, const std::string& path, const std::string& shown) {
  Tensor t = Tensor::empty(d.desc);
  if (t.numel() > 0 && H5Dread(d.ds.get(), h5::native_type(t.dtype()), H5S_ALL, H5S_ALL, H5P_DEFAULT, t.raw()) < 0)
    h5::fail(path, "cannot read dataset '" + shown + "'");
  return t;
}

h5::Handle open_file(const std::string& path) {
  return h5::file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), path, "cannot open for reading");
}

std::string join(const std::string& group, const std::string& rel) {
  return group.empty() || group.back() == '/' ? group + rel : group + "/" + rel;
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

}  // namespace

void write_tensors(const std::string& path, const NamedTensors& tensors,
                   const std::map<std::string, std::string>& string_attrs) {
  check_names(path, tensors);
  auto guard = h5::lock();
  const std::string tmp = temp_name(path);
  try {
    h5::Handle fapl = h5::plist(H5Pcreate(H5P_FILE_ACCESS), path, "cannot create file access list");
    if (H5Pset_fclose_degree(fapl.get(), H5F_CLOSE_STRONG) < 0) h5::fail(path, "cannot set close degree");
    h5::Handle file = h5::file(H5Fcreate(tmp.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, fapl.get()), path,
                               "cannot create temporary file '" + tmp + "'");
    for (const auto& [name, t] : tensors) write_dataset(file.get(), path, name, t);
    for (const auto& [key, value] : string_attrs) write_string_attr(file.get(), path, key, value);
    if (!file.close()) h5::fail(path, "cannot finish writing '" + tmp + "'");
    fsync_path(tmp, false, path);
    if (std::rename(tmp.c_str(), path.c_str()) != 0)
      bad_call(path, "cannot rename '" + tmp + "' over it: " + std::strerror(errno));
  } catch (...) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
  std::string dir = fs::path(path).parent_path().string();
  fsync_path(dir.empty() ? "." : dir, true, path);
}

Tensor read_tensor(const std::string& path, const std::string& dataset) {
  auto guard = h5::lock();
  h5::Handle file = open_file(path);
  OpenDataset d = open_dataset(file.get(), path, dataset, dataset);
  return read_open(d, path, dataset);
}

Tensor read_tensor_slice(const std::string& path, const std::string& dataset, const std::vector<int64_t>& start,
                         const std::vector<int64_t>& count) {
  auto guard = h5::lock();
  h5::Handle file = open_file(path);
  OpenDataset d = open_dataset(file.get(), path, dataset, dataset);
  const Shape& s = d.desc.shape;
  bool ok = start.size() == static_cast<size_t>(s.rank()) && count.size() == start.size();
  for (size_t a = 0; ok && a < start.size(); ++a)
    ok = start[a] >= 0 && count[a] >= 0 && start[a] + count[a] <= s[static_cast<int>(a)];
  if (!ok)
    bad_call(path, "dataset '" + dataset + "' of shape " + s.str() + " has no block at start " +
                       Shape(start).str() + " of size " + Shape(count).str());
  Tensor t = Tensor::empty(TensorDesc{Shape(count), d.desc.dtype});
  if (t.numel() == 0) return t;
  const std::string what = "cannot read a slice of dataset '" + dataset + "'";
  std::vector<hsize_t> hstart(start.begin(), start.end()), hcount(count.begin(), count.end());
  if (s.rank() > 0 &&
      H5Sselect_hyperslab(d.space.get(), H5S_SELECT_SET, hstart.data(), nullptr, hcount.data(), nullptr) < 0)
    h5::fail(path, what);
  h5::Handle mem = s.rank() == 0 ? h5::space(H5Screate(H5S_SCALAR), path, what)
                                 : h5::space(H5Screate_simple(s.rank(), hcount.data(), nullptr), path, what);
  if (H5Dread(d.ds.get(), h5::native_type(t.dtype()), mem.get(), d.space.get(), H5P_DEFAULT, t.raw()) < 0)
    h5::fail(path, what);
  return t;
}

NamedTensors read_tensors(const std::string& path, const std::string& group) {
  auto guard = h5::lock();
  h5::Handle file = open_file(path);
  h5::Handle g = h5::group(H5Gopen2(file.get(), group.c_str(), H5P_DEFAULT), path, "cannot open group '" + group + "'");
  NamedTensors out;
  for (const std::string& rel : dataset_names(g.get(), path, group)) {
    std::string shown = join(group, rel);
    OpenDataset d = open_dataset(g.get(), path, rel, shown);
    out.emplace_back(rel, read_open(d, path, shown));
  }
  return out;
}

std::vector<std::pair<std::string, TensorDesc>> list_tensors(const std::string& path, const std::string& group) {
  auto guard = h5::lock();
  h5::Handle file = open_file(path);
  h5::Handle g = h5::group(H5Gopen2(file.get(), group.c_str(), H5P_DEFAULT), path, "cannot open group '" + group + "'");
  std::vector<std::pair<std::string, TensorDesc>> out;
  for (const std::string& rel : dataset_names(g.get(), path, group))
    out.emplace_back(rel, open_dataset(g.get(), path, rel, join(group, rel)).desc);
  return out;
}

std::map<std::string, std::string> read_string_attrs(const std::string& path) {
  auto guard = h5::lock();
  h5::Handle file = open_file(path);
  h5::Handle root = h5::group(H5Gopen2(file.get(), "/", H5P_DEFAULT), path, "cannot open the root group");
  std::vector<std::string> names;
  auto collect = [](hid_t, const char* name, const H5A_info_t*, void* data) -> herr_t {
    static_cast<std::vector<std::string>*>(data)->push_back(name);
    return 0;
  };
  if (H5Aiterate2(root.get(), H5_INDEX_NAME, H5_ITER_INC, nullptr, collect, &names) < 0)
    h5::fail(path, "cannot list the root attributes");
  std::map<std::string, std::string> out;
  for (const std::string& name : names) {
    const std::string what = "cannot read attribute '" + name + "'";
    h5::Handle attr = h5::attr(H5Aopen(root.get(), name.c_str(), H5P_DEFAULT), path, what);
    h5::Handle ftype = h5::type(H5Aget_type(attr.get()), path, what);
    h5::Handle space = h5::space(H5Aget_space(attr.get()), path, what);
    if (H5Tget_class(ftype.get()) != H5T_STRING || H5Sget_simple_extent_type(space.get()) != H5S_SCALAR) continue;
    h5::Handle mtype = h5::type(H5Tcopy(H5T_C_S1), path, what);
    if (H5Tset_cset(mtype.get(), H5Tget_cset(ftype.get())) < 0) h5::fail(path, what);
    if (H5Tis_variable_str(ftype.get()) > 0) {
      if (H5Tset_size(mtype.get(), H5T_VARIABLE) < 0) h5::fail(path, what);
      char* s = nullptr;
      if (H5Aread(attr.get(), mtype.get(), &s) < 0) h5::fail(path, what);
      out[name] = s ? s : "";
      H5free_memory(s);
    } else {
      size_t n = H5Tget_size(ftype.get());
      if (H5Tset_size(mtype.get(), n + 1) < 0 || H5Tset_strpad(mtype.get(), H5T_STR_NULLTERM) < 0) h5::fail(path, what);
      std::string buf(n + 1, '\0');
      if (H5Aread(attr.get(), mtype.get(), buf.data()) < 0) h5::fail(path, what);
      out[name] = buf.c_str();
    }
  }
  return out;
}

}  // namespace braid::io
