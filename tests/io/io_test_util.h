// Helpers shared by the io tests: a self-deleting temp folder, file writers (plain and gzip), IDX file
// builders, dataset inputs and batch reads, and the text of a UserError.
#pragma once
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "temp_dir.h"
#include "io/dataset.h"

namespace braid::io::testing {

using ::braid::testing::TempDir;  // tests/temp_dir.h

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline void write_gz(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  gzclose(f);
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// An IDX file of unsigned bytes: magic 0x0000 08 <rank>, big-endian dims, then the data.
inline std::string idx_bytes(const std::vector<uint32_t>& dims, const std::vector<uint8_t>& data) {
  std::string s = {0, 0, 0x08, static_cast<char>(dims.size())};
  for (uint32_t d : dims)
    for (int b = 3; b >= 0; --b) s += static_cast<char>((d >> (8 * b)) & 0xff);
  s.append(data.begin(), data.end());
  return s;
}

inline DatasetInput input(const std::string& name, Shape shape, DType dtype, int64_t bound = 0) {
  return DatasetInput{name, TensorDesc{std::move(shape), dtype}, bound};
}

// Reads `indices` into freshly allocated batch tensors, one per input.
inline std::vector<Tensor> read_batch(const Dataset& ds, const std::vector<DatasetInput>& inputs,
                                      const std::vector<int64_t>& indices) {
  std::vector<Tensor> out;
  for (const auto& in : inputs) {
    std::vector<int64_t> d{static_cast<int64_t>(indices.size())};
    d.insert(d.end(), in.sample.shape.dims().begin(), in.sample.shape.dims().end());
    out.push_back(Tensor::empty(TensorDesc{Shape(d), in.sample.dtype}));
  }
  ds.read(indices, out);
  return out;
}

// The formatted UserError thrown by fn ("" and a test failure when it throws none).
inline std::string user_error(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const UserError& e) {
    return e.format();
  }
  ADD_FAILURE() << "expected a UserError";
  return "";
}

inline bool has_python_module(const std::string& module) {
  std::string cmd = std::string(BRAID_PYTHON) + " -c 'import " + module + "' >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

}  // namespace braid::io::testing
