// The hdf5 format: `{path, fields: {image: /x, label: /y}}`, one row per sample (axis 0 of every dataset).
// Each field's per-sample shape must equal its input's; values are converted to the input's dtype on load
// (floats feeding integer inputs must be whole numbers, and integers must lie below the input's bound).
// The needed rows are read into memory once; files larger than memory are deliberately not supported.
#include <cmath>

#include "core/finite.h"
#include "io/datasets/source.h"
#include "io/h5util.h"

namespace braid::io::data {

namespace {

// Reads rows [0, n) of `ds` as `mem_type` into `dst`.
void read_rows(hid_t ds, hid_t file_space, int rank, const std::vector<hsize_t>& dims, int64_t n, hid_t mem_type,
               void* dst, const std::string& path, const std::string& what) {
  if (n == 0) return;
  std::vector<hsize_t> start(static_cast<size_t>(rank), 0), count(dims);
  count[0] = static_cast<hsize_t>(n);
  if (H5Sselect_hyperslab(file_space, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr) < 0)
    h5::fail(path, what);
  h5::Handle mem = h5::space(H5Screate_simple(rank, count.data(), nullptr), path, what);
  if (H5Dread(ds, mem_type, mem.get(), file_space, H5P_DEFAULT, dst) < 0) h5::fail(path, what);
}

}  // namespace

std::vector<std::string> hdf5_fields(const DataSourceSpec& spec) {
  std::vector<std::string> f;
  for (const auto& [name, dataset] : spec.fields) f.push_back(name);
  return f;
}

Loaded load_hdf5(const LoadContext& c) {
  const std::string& path = c.spec.path;
  if (path.empty()) c.fail("hdf5 data needs a `path`");
  if (c.spec.fields.empty()) c.fail("hdf5 data needs `fields` ({name: /dataset, ...})");
  auto guard = h5::lock();
  h5::Handle file = h5::file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), path, "cannot open for reading");
  Loaded out;
  out.from = path;
  int64_t rows = -1;
  std::string rows_field;
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    const DatasetInput& in = c.inputs[k];
    const std::string& field = c.field_of[k];
    std::string dname;
    for (const auto& [f, d] : c.spec.fields)
      if (f == field) dname = d;
    const std::string where = "HDF5 file '" + path + "', dataset '" + dname + "' (field '" + field + "')";
    const std::string what = "cannot read dataset '" + dname + "' (field '" + field + "')";

    h5::Handle ds = h5::dataset(H5Dopen2(file.get(), dname.c_str(), H5P_DEFAULT), path, what);
    h5::Handle space = h5::space(H5Dget_space(ds.get()), path, what);
    h5::Handle type = h5::type(H5Dget_type(ds.get()), path, what);
    int rank = H5Sget_simple_extent_ndims(space.get());
    if (rank < 0) h5::fail(path, what);
    if (rank == 0) c.fail(where + " is a scalar; expected one row per sample along axis 0");
    std::vector<hsize_t> dims(static_cast<size_t>(rank));
    if (H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr) < 0) h5::fail(path, what);
    const auto n_avail = static_cast<int64_t>(dims[0]);
    if (rows >= 0 && n_avail != rows)
      c.fail(where + " has " + std::to_string(n_avail) + " rows but field '" + rows_field + "' has " + std::to_string(rows),
             "every field holds one row per sample");
    rows = n_avail;
    rows_field = field;

    Shape per_sample(std::vector<int64_t>(dims.begin() + 1, dims.end()));
    if (per_sample != in.sample.shape)
      c.fail(where + " has per-sample shape " + per_sample.str() + " but input '" + in.name + "' has shape " +
                 in.sample.shape.str(),
             per_sample.numel() == in.sample.numel() ? "same number of values: store the data in the input's shape, "
                                                       "or give the model the data's shape and a reshape layer"
                                                     : "");
    H5T_class_t cls = H5Tget_class(type.get());
    if (cls != H5T_INTEGER && cls != H5T_FLOAT) c.fail(where + " does not hold numbers (integers or floats)");

    const int64_t n = c.rows_needed(n_avail);
    const int64_t numel = in.sample.numel();
    std::vector<int64_t> batch_dims{n};
    batch_dims.insert(batch_dims.end(), in.sample.shape.dims().begin(), in.sample.shape.dims().end());
    Tensor t = Tensor::empty(TensorDesc{Shape(batch_dims), in.sample.dtype});
    const int64_t total = n * numel;
    if (is_float(in.sample.dtype)) {
      read_rows(ds.get(), space.get(), rank, dims, n, h5::native_type(in.sample.dtype), t.raw(), path, what);
      if (const NonFinite nf = find_non_finite(t); nf.count > 0)
        c.fail(where + " holds " + non_finite_name(nf.first_value) + " at sample " + std::to_string(nf.first / numel) +
                   " (" + std::to_string(nf.count) + " non-finite value(s) in all)",
               "NaN or Inf in the inputs makes every loss NaN; clean the data");
    } else if (cls == H5T_FLOAT) {  // floats feeding an integer input: must be whole numbers
      std::vector<double> v(static_cast<size_t>(total));
      read_rows(ds.get(), space.get(), rank, dims, n, H5T_NATIVE_DOUBLE, v.data(), path, what);
      for (int64_t j = 0; j < total; ++j) {
        double x = v[static_cast<size_t>(j)];
        if (x != std::floor(x) || std::fabs(x) > 9.0e15)
          c.fail(where + " holds " + std::to_string(x) + " at sample " + std::to_string(j / numel) +
                 ", not an integer, but input '" + in.name + "' is " + std::string(dtype_name(in.sample.dtype)));
      }
      check_int_range(c, k, where, v.data(), total, numel);
      for (int64_t j = 0; j < total; ++j) set_from_double(t, j, v[static_cast<size_t>(j)]);
    } else {  // integers: read as i64, check the range, narrow
      std::vector<int64_t> v(static_cast<size_t>(total));
      read_rows(ds.get(), space.get(), rank, dims, n, H5T_NATIVE_INT64, v.data(), path, what);
      check_int_range(c, k, where, v.data(), total, numel);
      for (int64_t j = 0; j < total; ++j) {
        int64_t x = v[static_cast<size_t>(j)];
        if (in.sample.dtype == DType::i64) {
          t.data<int64_t>()[j] = x;
        } else {
          if (x < INT32_MIN || x > INT32_MAX)
            c.fail(where + " holds " + std::to_string(x) + ", which does not fit input '" + in.name + "' (i32)");
          t.data<int32_t>()[j] = static_cast<int32_t>(x);
        }
      }
    }
    out.readers.push_back(make_tensor_reader(t));
  }
  out.size = rows;
  return out;
}

}  // namespace braid::io::data
