// HDF5 tensor files: atomic writes (h5::write_atomically: temporary file, fsync, rename, fsync of the
// folder) and typed reads.
// Every HDF5 call runs under h5::lock() and is checked; errors name the file and the dataset.
#include "io/h5file.h"

#include <set>

#include "io/h5util.h"

namespace braid::io {

namespace {

[[noreturn]] void bad_call(const std::string& path, const std::string& msg) {
  throw UserError(SourceLoc{}, "HDF5 file '" + path + "': " + msg);
}

void check_names(const std::string& path, const NamedTensors& tensors) {
  std::set<std::string> seen;
  for (const auto& [name, t] : tensors) {
    bool ok = name.size() > 1 && name[0] == '/' && name.back() != '/' && name.find("//") == std::string::npos;
    if (!ok) bad_call(path, "dataset name '" + name + "' must be an absolute HDF5 path such as '/params/fc.weight'");
    if (!seen.insert(name).second) bad_call(path, "dataset '" + name + "' is written twice");
    if (h5::file_type(t.dtype()) < 0)
      bad_call(path, "dataset '" + name + "': cannot store " + std::string(dtype_name(t.dtype())) +
                         " tensors (f32, f64, i32 and i64 only)");
    if (!t.defined()) bad_call(path, "dataset '" + name + "': tensor has no data");
  }
}

h5::Handle open_file(const std::string& path) { return h5::open_read_only(path); }

std::string join(const std::string& group, const std::string& rel) {
  return group.empty() || group.back() == '/' ? group + rel : group + "/" + rel;
}

}  // namespace

void write_tensors(const std::string& path, const NamedTensors& tensors,
                   const std::map<std::string, std::string>& string_attrs) {
  check_names(path, tensors);
  auto guard = h5::lock();
  h5::write_atomically(path, {}, [&](hid_t file) {
    for (const auto& [name, t] : tensors) {
      h5::Handle ds = h5::write_dataset(file, path, name, t);
      if (!ds.close()) h5::fail(path, "cannot write dataset '" + name + "'");
    }
    for (const auto& [key, value] : string_attrs) h5::write_string_attr(file, path, key, value);
  });
}

Tensor read_tensor(const std::string& path, const std::string& dataset) {
  auto guard = h5::lock();
  h5::Handle file = open_file(path);
  h5::OpenDataset d = h5::open_dataset(file.get(), path, dataset, dataset);
  return h5::read_dataset(d, path, dataset);
}

Tensor read_tensor_slice(const std::string& path, const std::string& dataset, const std::vector<int64_t>& start,
                         const std::vector<int64_t>& count) {
  auto guard = h5::lock();
  h5::Handle file = open_file(path);
  h5::OpenDataset d = h5::open_dataset(file.get(), path, dataset, dataset);
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
  for (const std::string& rel : h5::dataset_names(g.get(), path, group)) {
    std::string shown = join(group, rel);
    h5::OpenDataset d = h5::open_dataset(g.get(), path, rel, shown);
    out.emplace_back(rel, h5::read_dataset(d, path, shown));
  }
  return out;
}

std::vector<std::pair<std::string, TensorDesc>> list_tensors(const std::string& path, const std::string& group) {
  auto guard = h5::lock();
  h5::Handle file = open_file(path);
  h5::Handle g = h5::group(H5Gopen2(file.get(), group.c_str(), H5P_DEFAULT), path, "cannot open group '" + group + "'");
  std::vector<std::pair<std::string, TensorDesc>> out;
  for (const std::string& rel : h5::dataset_names(g.get(), path, group))
    out.emplace_back(rel, h5::open_dataset(g.get(), path, rel, join(group, rel)).desc);
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
    std::string value;
    if (h5::read_string_attr(root.get(), path, name, &value)) out[name] = value;
  }
  return out;
}

}  // namespace braid::io
