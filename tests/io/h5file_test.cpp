// HDF5 tensor files: round trips of every dtype, scalars and empty tensors, groups and relative names,
// slices, string attributes, errors naming file and dataset, atomic replacement (a failed write leaves the
// previous file intact and no temporary behind), and interchange with h5py in both directions.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "io/h5file.h"
#include "io_test_util.h"

using namespace braid;
using namespace braid::io;
using namespace braid::io::testing;
namespace fs = std::filesystem;

namespace {

Tensor iota(Shape s, DType t, double scale = 1) {
  Tensor x = Tensor::empty({std::move(s), t});
  for (int64_t i = 0; i < x.numel(); ++i) {
    double v = static_cast<double>(i) * scale - 3;
    switch (t) {
      case DType::i32: x.data<int32_t>()[i] = static_cast<int32_t>(v); break;
      case DType::i64: x.data<int64_t>()[i] = static_cast<int64_t>(v) * 1000000007LL; break;
      default: set_from_double(x, i, v);
    }
  }
  return x;
}

bool same(const Tensor& a, const Tensor& b) {
  return a.desc() == b.desc() && (a.bytes() == 0 || std::memcmp(a.raw(), b.raw(), a.bytes()) == 0);
}

NamedTensors sample_tensors() {
  return {{"/params/fc.weight", iota(Shape{3, 4}, DType::f32, 0.25)},
          {"/params/fc.bias", iota(Shape{3}, DType::f64, 1.0 / 3)},
          {"/params/h.0/attn.in_proj_weight", iota(Shape{2, 2, 2}, DType::f32)},
          {"/state/step", iota(Shape{}, DType::i64)},
          {"/state/cursor", iota(Shape{2}, DType::i32)},
          {"/state/empty", Tensor::empty({Shape{0, 3}, DType::f32})},
          {"/big", iota(Shape{700, 600}, DType::f32)}};  // several chunks
}

size_t files_in(const std::string& dir) {
  size_t n = 0;
  for (auto it = fs::directory_iterator(dir); it != fs::directory_iterator(); ++it) ++n;
  return n;
}

}  // namespace

TEST(H5File, RoundTripEveryDtype) {
  TempDir dir;
  std::string p = dir.file("ck.h5");
  NamedTensors in = sample_tensors();
  write_tensors(p, in, {{"format", "braid-checkpoint"}, {"note", "ünïcode \"quoted\""}});
  for (const auto& [name, t] : in) EXPECT_TRUE(same(read_tensor(p, name), t)) << name;
  auto attrs = read_string_attrs(p);
  EXPECT_EQ(attrs.size(), 2u);
  EXPECT_EQ(attrs["format"], "braid-checkpoint");
  EXPECT_EQ(attrs["note"], "ünïcode \"quoted\"");
  EXPECT_EQ(files_in(dir.path()), 1u);  // no temporary left behind
}

TEST(H5File, ReadGroupRecursivelyWithRelativeNames) {
  TempDir dir;
  std::string p = dir.file("ck.h5");
  NamedTensors in = sample_tensors();
  write_tensors(p, in);
  NamedTensors params = read_tensors(p, "/params");
  ASSERT_EQ(params.size(), 3u);
  EXPECT_EQ(params[0].first, "fc.bias");  // name order
  EXPECT_EQ(params[1].first, "fc.weight");
  EXPECT_EQ(params[2].first, "h.0/attn.in_proj_weight");
  EXPECT_TRUE(same(params[1].second, in[0].second));
  EXPECT_EQ(read_tensors(p, "/").size(), in.size());
  auto listed = list_tensors(p, "/state");
  ASSERT_EQ(listed.size(), 3u);
  EXPECT_EQ(listed[0].first, "cursor");
  EXPECT_EQ(listed[1].second.str(), "f32[0, 3]");
  EXPECT_EQ(listed[2].second.str(), "i64[]");
}

TEST(H5File, Slices) {
  TempDir dir;
  std::string p = dir.file("ck.h5");
  Tensor w = iota(Shape{4, 6}, DType::f32);
  write_tensors(p, {{"/w", w}});
  Tensor s = read_tensor_slice(p, "/w", {1, 2}, {2, 3});
  ASSERT_EQ(s.shape(), (Shape{2, 3}));
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t c = 0; c < 3; ++c) EXPECT_EQ(s.data<float>()[r * 3 + c], w.data<float>()[(r + 1) * 6 + c + 2]);
  std::string e = user_error([&] { read_tensor_slice(p, "/w", {3, 0}, {2, 6}); });
  EXPECT_NE(e.find("'/w' of shape [4, 6] has no block"), std::string::npos) << e;
}

TEST(H5File, ErrorsNameFileAndDataset) {
  TempDir dir;
  std::string p = dir.file("ck.h5");
  write_tensors(p, {{"/params/w", iota(Shape{2}, DType::f32)}});
  std::string e = user_error([&] { read_tensor(p, "/params/nope"); });
  EXPECT_NE(e.find(p), std::string::npos) << e;
  EXPECT_NE(e.find("'/params/nope'"), std::string::npos) << e;
  e = user_error([&] { read_tensor(dir.file("absent.h5"), "/w"); });
  EXPECT_NE(e.find("absent.h5"), std::string::npos) << e;
  e = user_error([&] { read_tensors(p, "/nogroup"); });
  EXPECT_NE(e.find("'/nogroup'"), std::string::npos) << e;
  write_file(dir.file("junk.h5"), "not hdf5 at all");
  e = user_error([&] { read_tensor(dir.file("junk.h5"), "/w"); });
  EXPECT_NE(e.find("junk.h5"), std::string::npos) << e;
  e = user_error([&] { write_tensors(p, {{"params/w", iota(Shape{2}, DType::f32)}}); });
  EXPECT_NE(e.find("absolute HDF5 path"), std::string::npos) << e;
  e = user_error([&] { write_tensors(p, {{"/a", iota(Shape{2}, DType::f32)}, {"/a", iota(Shape{2}, DType::f32)}}); });
  EXPECT_NE(e.find("written twice"), std::string::npos) << e;
}

TEST(H5File, FailedWriteLeavesPreviousFileIntact) {
  TempDir dir;
  std::string p = dir.file("ck.h5");
  NamedTensors first = {{"/params/w", iota(Shape{8}, DType::f32)}};
  write_tensors(p, first, {{"step", "1"}});
  std::string before = read_bytes(p);

  // Fails inside HDF5 after the temporary file holds data: "/params/v" is a dataset, not a group.
  NamedTensors bad = {{"/params/v", iota(Shape{1000}, DType::f64)}, {"/params/v/x", iota(Shape{2}, DType::f32)}};
  std::string e = user_error([&] { write_tensors(p, bad, {{"step", "2"}}); });
  EXPECT_NE(e.find("'/params/v/x'"), std::string::npos) << e;
  // Fails before HDF5: a dtype files cannot hold.
  e = user_error([&] { write_tensors(p, {{"/h", Tensor::empty({Shape{2}, DType::bf16})}}); });
  EXPECT_NE(e.find("bf16"), std::string::npos) << e;
  EXPECT_TRUE(read_bytes(p) == before) << "the previous file changed";
  EXPECT_EQ(files_in(dir.path()), 1u);
  EXPECT_EQ(read_string_attrs(p)["step"], "1");

  // The rename fails: the target is a folder.
  fs::create_directory(dir.file("folder.h5"));
  EXPECT_THROW(write_tensors(dir.file("folder.h5"), first), UserError);
  EXPECT_TRUE(fs::is_directory(dir.file("folder.h5")));
  EXPECT_EQ(files_in(dir.path()), 2u);
}

TEST(H5File, NonWritableFolderLeavesFileIntact) {
  if (::geteuid() == 0) GTEST_SKIP() << "running as root: permissions do not stop writes";
  TempDir dir;
  std::string sub = dir.file("ro");
  fs::create_directory(sub);
  std::string p = sub + "/ck.h5";
  write_tensors(p, {{"/w", iota(Shape{4}, DType::f32)}});
  std::string before = read_bytes(p);
  fs::permissions(sub, fs::perms::owner_read | fs::perms::owner_exec);
  std::string e = user_error([&] { write_tensors(p, {{"/w", iota(Shape{5}, DType::f32)}}); });
  fs::permissions(sub, fs::perms::owner_all);
  EXPECT_NE(e.find(p), std::string::npos) << e;
  EXPECT_TRUE(read_bytes(p) == before) << "the previous file changed";
  EXPECT_EQ(files_in(sub), 1u);
}

TEST(H5File, MissingFolderIsAUserError) {
  TempDir dir;
  std::string e = user_error([&] { write_tensors(dir.file("no/such/dir/ck.h5"), {{"/w", iota(Shape{2}, DType::f32)}}); });
  EXPECT_NE(e.find("no/such/dir/ck.h5"), std::string::npos) << e;
}

TEST(H5File, H5pyReadsOurFiles) {
  if (!has_python_module("h5py")) GTEST_SKIP() << "h5py is not installed for " << BRAID_PYTHON;
  TempDir dir;
  std::string p = dir.file("ck.h5");
  write_tensors(p, sample_tensors(), {{"format", "braid"}});
  std::string script = dir.file("check.py");
  write_file(script, R"(
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
w = f["/params/fc.weight"]
assert w.dtype == np.float32 and w.shape == (3, 4), (w.dtype, w.shape)
assert np.array_equal(w[...], (np.arange(12, dtype=np.float64) * 0.25 - 3).astype(np.float32).reshape(3, 4))
assert w.chunks is not None and w.compression is None
b = f["/params/fc.bias"]
assert b.dtype == np.float64 and np.allclose(b[...], np.arange(3) / 3.0 - 3)
assert f["/state/step"].shape == () and f["/state/step"][()] == -3 * 1000000007
assert f["/state/cursor"].dtype == np.int32
assert f["/state/empty"].shape == (0, 3)
assert f["/big"].chunks is not None and f["/big"].shape == (700, 600)
a = f.attrs["format"]
assert (a.decode() if isinstance(a, bytes) else a) == "braid", a
print("ok")
)");
  std::string cmd = std::string(BRAID_PYTHON) + " " + script + " " + p;
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

TEST(H5File, WeReadH5pyFiles) {
  if (!has_python_module("h5py")) GTEST_SKIP() << "h5py is not installed for " << BRAID_PYTHON;
  TempDir dir;
  std::string p = dir.file("torch.h5");
  std::string script = dir.file("write.py");
  write_file(script, R"(
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "w") as f:
    f["/params/w"] = np.arange(6, dtype=np.float32).reshape(2, 3)
    f["/params/u8"] = np.array([0, 255], dtype=np.uint8)
    f["/params/u32"] = np.array([4000000000], dtype=np.uint32)
    f["/params/sub/i16"] = np.array([[-5]], dtype=np.int16)
    f.attrs["vlen"] = "variable"
    f.attrs["fixed"] = np.bytes_("fixed!")
    f.attrs["number"] = 3
)");
  std::string cmd = std::string(BRAID_PYTHON) + " " + script + " " + p;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  NamedTensors t = read_tensors(p, "/params");
  ASSERT_EQ(t.size(), 4u);
  EXPECT_EQ(t[0].first, "sub/i16");
  EXPECT_EQ(t[0].second.desc().str(), "i32[1, 1]");
  EXPECT_EQ(t[0].second.data<int32_t>()[0], -5);
  EXPECT_EQ(t[1].first, "u32");
  EXPECT_EQ(t[1].second.data<int64_t>()[0], 4000000000LL);
  EXPECT_EQ(t[2].second.data<int32_t>()[1], 255);
  EXPECT_EQ(t[3].second.desc().str(), "f32[2, 3]");
  EXPECT_EQ(t[3].second.data<float>()[5], 5.0f);
  auto attrs = read_string_attrs(p);
  EXPECT_EQ(attrs.size(), 2u);
  EXPECT_EQ(attrs["vlen"], "variable");
  EXPECT_EQ(attrs["fixed"], "fixed!");
}
