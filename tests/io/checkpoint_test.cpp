// Checkpoint files and folders: exact round trips of everything a checkpoint holds, the documented layout
// (chunked datasets, slices, checksum attributes, HDF5 1.10 format), checksums against zlib, hashes against
// FNV-1a's published values, compare_to_model, `latest` and keep-N pruning, `braid inspect`'s text, and
// interchange with h5py and PyTorch (skipped, saying so, without them). Damaged files: checkpoint_bad_test.cpp.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cmath>
#include <filesystem>
#include <limits>

#include "checkpoint_test_util.h"
#include "io/h5file.h"
#include "io_test_util.h"

using namespace braid;
using namespace braid::io;
using namespace braid::io::testing;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::string crc_hex(const void* p, size_t n) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08lx", crc32_z(0, static_cast<const Bytef*>(p), n));
  return buf;
}

}  // namespace

TEST(Checkpoint, RoundTripIsExact) {
  TempDir dir;
  std::string p = dir.file("ck.h5");
  Checkpoint c = sample_checkpoint();
  c.meta.run_text += std::string(300000, 'x');  // texts past HDF5's 64 KiB attribute limit
  write_checkpoint(p, c);
  Checkpoint r = read_checkpoint(p);
  expect_same_checkpoint(c, r);
  EXPECT_EQ(r.meta.run_hash, text_hash(c.meta.run_text));
  EXPECT_EQ(r.meta.model_hash, text_hash(c.meta.model_text));
  EXPECT_EQ(r.meta.created.size(), 20u) << r.meta.created;  // 2024-05-01T12:00:00Z
  EXPECT_EQ(r.meta.created.back(), 'Z');
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"ck.h5"});  // no temporary left
  CheckpointMeta m = read_checkpoint_meta(p);
  EXPECT_EQ(m.step, 42);
  EXPECT_EQ(m.run_text, c.meta.run_text);
}

// fp16 runs' dynamic loss scale: two /optimizer attributes, read back exactly, shown by `braid inspect`; absent
// from every other run's file (read as 0).
TEST(Checkpoint, LossScaleRoundTripsAndIsAbsentOtherwise) {
  TempDir dir;
  Checkpoint c = sample_checkpoint();
  c.loss_scale = 1024.0;
  c.loss_scale_growth_tracker = 17;
  write_checkpoint(dir.file("scaled.h5"), c);
  Checkpoint r = read_checkpoint(dir.file("scaled.h5"));
  EXPECT_EQ(r.loss_scale, 1024.0);
  EXPECT_EQ(r.loss_scale_growth_tracker, 17);
  Checkpoint plain = sample_checkpoint();
  write_checkpoint(dir.file("plain.h5"), plain);
  r = read_checkpoint(dir.file("plain.h5"));
  EXPECT_EQ(r.loss_scale, 0);
  EXPECT_EQ(r.loss_scale_growth_tracker, 0);
  {
    hid_t f = H5Fopen(dir.file("plain.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    hid_t g = H5Gopen2(f, "/optimizer", H5P_DEFAULT);
    EXPECT_EQ(H5Aexists(g, "loss_scale"), 0);
    H5Gclose(g);
    H5Fclose(f);
  }
}

TEST(Checkpoint, GivenCreatedAndHashesAreKept) {
  TempDir dir;
  Checkpoint c = sample_checkpoint();
  c.meta.created = "2020-01-02T03:04:05Z";
  c.meta.run_hash = "0123456789abcdef";
  write_checkpoint(dir.file("a.h5"), c);
  Checkpoint r = read_checkpoint(dir.file("a.h5"));
  EXPECT_EQ(r.meta.created, "2020-01-02T03:04:05Z");
  EXPECT_EQ(r.meta.run_hash, "0123456789abcdef");
}

TEST(Checkpoint, WeightsOnlySkipsOptimizerAndRng) {
  TempDir dir;
  Checkpoint c = sample_checkpoint();
  write_checkpoint(dir.file("a.h5"), c);
  Checkpoint r = read_checkpoint(dir.file("a.h5"), ReadOptions{.weights_only = true});
  expect_same_tensors(c.params, r.params, "params");
  expect_same_tensors(c.buffers, r.buffers, "buffers");
  EXPECT_TRUE(r.optimizer.empty());
  EXPECT_TRUE(r.rng.empty());
  EXPECT_EQ(r.optimizer_steps, 42);  // the small state is always read (and checked)
  EXPECT_EQ(r.meta.step, 42);
}

TEST(Checkpoint, EmptyCheckpointRoundTrips) {
  TempDir dir;
  Checkpoint c;
  write_checkpoint(dir.file("e.h5"), c);
  expect_same_checkpoint(c, read_checkpoint(dir.file("e.h5")));
}

TEST(Checkpoint, LayoutIsChunkedSliceableAndDocumented) {
  TempDir dir;
  std::string p = dir.file("ck.h5");
  Checkpoint c = sample_checkpoint(7, 3000);  // 12 MB: three 4 MiB chunks
  write_checkpoint(p, c);
  // A later plan reads only the rows it needs.
  Tensor rows = read_tensor_slice(p, "/params/big.weight", {1500, 0}, {10, 1024});
  const float* full = c.params[3].second.data<float>();
  for (int64_t i = 0; i < rows.numel(); ++i) ASSERT_EQ(rows.data<float>()[i], full[1500 * 1024 + i]);
  hid_t f = H5Fopen(p.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  hid_t ds = H5Dopen2(f, "/params/big.weight", H5P_DEFAULT);
  hid_t dcpl = H5Dget_create_plist(ds);
  EXPECT_EQ(H5Pget_layout(dcpl), H5D_CHUNKED);
  hsize_t chunk[2] = {0, 0};
  H5Pget_chunk(dcpl, 2, chunk);
  EXPECT_EQ(chunk[0], 1024u);  // 4 MiB of 4 KiB rows
  EXPECT_EQ(chunk[1], 1024u);
  H5Pclose(dcpl);
  H5Dclose(ds);
  H5F_libver_t low, high;
  hid_t fapl = H5Fget_access_plist(f);
  H5Pget_libver_bounds(fapl, &low, &high);
  EXPECT_EQ(low, H5F_LIBVER_V110);
  H5Pclose(fapl);
  H5Fclose(f);
  // The documented paths, read with the plain tensor API.
  auto opt = list_tensors(p, "/optimizer");
  ASSERT_EQ(opt.size(), 8u);
  EXPECT_EQ(opt[0].first, "big.weight/exp_avg");
  Tensor rng = read_tensor(p, "/rng/dropout");
  EXPECT_EQ(rng.desc().str(), "i64[2]");
  EXPECT_EQ(static_cast<uint64_t>(rng.data<int64_t>()[0]), 0x8000000000000001ULL);
  EXPECT_EQ(read_string_attrs(p).at("format"), "braid-checkpoint");
}

// Tensors read straight from the file (chunk by chunk, on several threads): chunks split along an inner
// axis, edge chunks holding fewer rows, rows longer than a chunk, and contiguous scalars.
TEST(Checkpoint, EveryChunkLayoutReadsBackExactly) {
  TempDir dir;
  Checkpoint c;
  c.params = {{"a", ramp(Shape{3, 5, 300000}, DType::f32, 1e-3)},  // chunks [1, 3, 300000]: 2 rows at the edge
              {"b", ramp(Shape{2, 1200000}, DType::f32, 1e-3)},    // rows of 4.8 MB: chunks [1, 1048576]
              {"c", ramp(Shape{2000, 3, 4}, DType::i64)},          // one chunk of whole axes
              {"d", ramp(Shape{1100, 1024}, DType::f64, 0.5)},     // chunks [512, 1024], the last of 76 rows
              {"e", ramp(Shape{}, DType::f64)}};                   // contiguous
  write_checkpoint(dir.file("c.h5"), c);
  Checkpoint r = read_checkpoint(dir.file("c.h5"));
  expect_same_tensors(c.params, r.params, "params");
  expect_same_tensors(c.params, read_checkpoint(dir.file("c.h5"), {.verify_checksums = false}).params, "unverified");
}

// Datasets laid out otherwise than braid writes them (compressed, big-endian, other chunks: a file changed by
// another tool) are read through HDF5. (Such a file no longer matches its header: read unverified.)
TEST(Checkpoint, OtherLayoutsAreReadThroughHdf5) {
  TempDir dir;
  std::string p = dir.file("c.h5");
  Checkpoint c = sample_checkpoint();
  write_checkpoint(p, c);
  hid_t f = H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  auto replace = [&](const std::string& name, const Tensor& t, hid_t ftype, bool gzip) {
    ASSERT_GE(H5Ldelete(f, name.c_str(), H5P_DEFAULT), 0);
    std::vector<hsize_t> dims(t.shape().dims().begin(), t.shape().dims().end());
    hid_t sp = H5Screate_simple(t.shape().rank(), dims.data(), nullptr), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    std::vector<hsize_t> chunk(dims.size(), 1);
    chunk.back() = dims.back();
    H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data());
    if (gzip) H5Pset_deflate(dcpl, 1);
    hid_t ds = H5Dcreate2(f, name.c_str(), ftype, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    ASSERT_GE(ds, 0);
    ASSERT_GE(H5Dwrite(ds, t.dtype() == DType::f64 ? H5T_NATIVE_DOUBLE : H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.raw()), 0);
    H5Dclose(ds), H5Pclose(dcpl), H5Sclose(sp);
  };
  replace("/params/big.weight", c.params[3].second, H5T_IEEE_F32LE, true);
  replace("/params/fc.weight", c.params[0].second, H5T_IEEE_F32BE, false);
  replace("/params/h.0.attn.in_proj_weight", c.params[2].second, H5T_IEEE_F64LE, false);  // rows of 2: chunks [1, 2]
  H5Fclose(f);
  EXPECT_NE(user_error([&] { read_checkpoint(p); }).find("checkpoint '" + p + "'"), std::string::npos);
  expect_same_tensors(c.params, read_checkpoint(p, {.verify_checksums = false}).params, "params");
}

TEST(Checkpoint, ChecksumIsZlibCrc32OfTheBytes) {
  // "123456789" + "abc" as three i32: the CRC-32 of those 12 bytes (zlib's, PNG's, Python's zlib.crc32).
  Tensor b = Tensor::empty({Shape{3}, DType::i32});
  std::memcpy(b.raw(), "123456789abc", 12);
  EXPECT_EQ(tensor_checksum(b), "crc32:" + crc_hex("123456789abc", 12));
  EXPECT_EQ(crc_hex("123456789", 9), "cbf43926");  // the CRC-32 check value
  EXPECT_EQ(tensor_checksum(Tensor::empty({Shape{0}, DType::f32})), "crc32:00000000");
  // Large tensors are checksummed in pieces on several threads; the result is the same CRC.
  Tensor big = ramp(Shape{50 << 20}, DType::f32, 1e-6);  // 200 MB
  EXPECT_EQ(tensor_checksum(big), "crc32:" + crc_hex(big.raw(), big.bytes()));
}

TEST(Checkpoint, TextHashIsFnv1a64) {
  EXPECT_EQ(text_hash(""), "cbf29ce484222325");  // FNV-1a 64 test vectors
  EXPECT_EQ(text_hash("a"), "af63dc4c8601ec8c");
  EXPECT_EQ(text_hash("foobar"), "85944171f73967e8");
}

TEST(Checkpoint, CompareToModelNamesTheFirstDifference) {
  Checkpoint c = sample_checkpoint();
  std::vector<std::pair<std::string, TensorDesc>> model;
  for (const auto* g : {&c.params, &c.buffers})
    for (const auto& [n, t] : *g) model.emplace_back(n, t.desc());
  EXPECT_TRUE(compare_to_model(c, model).empty());

  auto wrong_shape = model;
  wrong_shape[0].second.shape = Shape{3, 5};
  auto d = compare_to_model(c, wrong_shape);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0], "tensor 'fc.weight': the checkpoint has f32[3, 4], the model f32[3, 5]");

  auto wrong_dtype = model;
  wrong_dtype[1].second.dtype = DType::f64;
  d = compare_to_model(c, wrong_dtype);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0], "tensor 'fc.bias': the checkpoint has f32[3], the model f64[3]");

  auto other_model = model;
  other_model.erase(other_model.begin());
  other_model.emplace_back("head.weight", TensorDesc{Shape{2, 2}, DType::f32});
  d = compare_to_model(c, other_model);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0], "tensor 'head.weight' (f32[2, 2]) of the model is not in the checkpoint");
  EXPECT_EQ(d[1], "tensor 'fc.weight' (f32[3, 4]) of the checkpoint is not in the model");
}

TEST(CheckpointDir, SaveMovesLatestAndKeepsTheNewest) {
  TempDir dir;
  std::string d = dir.file("ckpts/run1");  // created by the first save
  CheckpointDir cd(d, 2);
  EXPECT_EQ(cd.latest(), "");
  for (int64_t s : {10, 20, 30}) {
    std::string p = cd.save(sample_checkpoint(s, 4));
    EXPECT_EQ(p, d + "/" + CheckpointDir::file_name(s));
    EXPECT_EQ(cd.latest(), p);
  }
  EXPECT_EQ(names_in(d), (std::vector<std::string>{"latest", "step_00000020.h5", "step_00000030.h5"}));
  EXPECT_EQ(read_bytes(d + "/latest"), "step_00000030.h5\n");
  EXPECT_EQ(read_checkpoint(cd.latest()).meta.step, 30);
  // Saving an older step (after resuming from it) never deletes the checkpoint `latest` names.
  cd.save(sample_checkpoint(25, 4));
  EXPECT_EQ(names_in(d), (std::vector<std::string>{"latest", "step_00000025.h5", "step_00000030.h5"}));
  EXPECT_EQ(cd.latest(), d + "/step_00000025.h5");
  EXPECT_EQ(cd.list().size(), 2u);
  EXPECT_EQ(CheckpointDir::file_name(123456789), "step_123456789.h5");
}

TEST(CheckpointDir, SaveRemovesTemporariesOfDeadProcessesOnly) {
  TempDir dir;
  CheckpointDir cd(dir.path(), 3);
  cd.save(sample_checkpoint(1, 4));
  pid_t dead = 0;
  for (pid_t p = 30000; p > 2; --p)
    if (::kill(p, 0) != 0 && errno == ESRCH) {
      dead = p;
      break;
    }
  ASSERT_GT(dead, 0);
  std::string stale = dir.file(".step_00000002.h5.tmp-" + std::to_string(dead) + "-0");
  std::string live = dir.file(".step_00000002.h5.tmp-" + std::to_string(::getppid()) + "-0");
  std::string other = dir.file(".notes.tmp-" + std::to_string(dead) + "-0");
  for (const auto& f : {stale, live, other}) write_file(f, "partial");
  cd.save(sample_checkpoint(3, 4));
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(live));   // a running process may still be writing it
  EXPECT_TRUE(fs::exists(other));  // not ours
}

TEST(CheckpointDir, ResolveLatestFolderAndPath) {
  TempDir dir;
  CheckpointDir cd(dir.path(), 1);
  std::string e = user_error([&] { CheckpointDir::resolve(dir.path(), "latest"); });
  EXPECT_NE(e.find("no checkpoint to use in '" + dir.path() + "'"), std::string::npos) << e;
  std::string p = cd.save(sample_checkpoint(5, 4));
  EXPECT_EQ(CheckpointDir::resolve(dir.path(), "latest"), p);
  EXPECT_EQ(CheckpointDir::resolve("", dir.path()), p);  // a folder means its latest
  EXPECT_EQ(CheckpointDir::resolve("", p), p);
  e = user_error([&] { CheckpointDir::resolve("", dir.file("nope.h5")); });
  EXPECT_NE(e.find("checkpoint '" + dir.file("nope.h5") + "' does not exist"), std::string::npos) << e;
  e = user_error([&] { CheckpointDir::resolve("", "latest"); });
  EXPECT_NE(e.find("checkpoint.dir"), std::string::npos) << e;
  e = user_error([&] { CheckpointDir(dir.path(), 0); });
  EXPECT_NE(e.find("keep must be at least 1"), std::string::npos) << e;
}

TEST(Checkpoint, InspectShowsRunStepAndEveryTensor) {
  TempDir dir;
  std::string p = dir.file("ck.h5");
  write_checkpoint(p, sample_checkpoint());
  std::string s = inspect_checkpoint(p);
  EXPECT_NE(s.find("step 42, epoch 3, 1344 samples seen"), std::string::npos) << s;
  EXPECT_NE(s.find("run   configs/tiny.yaml (hash " + text_hash(sample_checkpoint().meta.run_text) + ")"), std::string::npos) << s;
  EXPECT_NE(s.find("optimizer adamw, 42 steps"), std::string::npos) << s;
  EXPECT_NE(s.find("random streams: dropout, init, shuffle"), std::string::npos) << s;
  Checkpoint c = read_checkpoint(p);
  for (const auto& [n, t] : c.params) {
    size_t at = s.find("/params/" + n + " ");
    ASSERT_NE(at, std::string::npos) << n << "\n" << s;
    std::string line = s.substr(at, s.find('\n', at) - at);
    EXPECT_NE(line.find(t.shape().str()), std::string::npos) << line;
    EXPECT_NE(line.find(tensor_checksum(t)), std::string::npos) << line;
  }
  EXPECT_NE(s.find("/optimizer/fc.weight/exp_avg_sq "), std::string::npos) << s;
  size_t at = s.find("/buffers/bn1.num_batches_tracked ");
  ASSERT_NE(at, std::string::npos) << s;
  EXPECT_NE(s.substr(at, s.find('\n', at) - at).find(" []  "), std::string::npos) << s;
  EXPECT_NE(s.find("all 18 checksums verified"), std::string::npos) << s;  // 15 tensors, 3 random streams
}

TEST(Checkpoint, H5pyReadsTheLayoutAndVerifiesChecksums) {
  if (!has_python_module("h5py")) GTEST_SKIP() << "h5py is not importable by " << BRAID_PYTHON;
  TempDir dir;
  std::string p = dir.file("ck.h5");
  write_checkpoint(p, sample_checkpoint());
  std::string script = dir.file("read.py");
  write_file(script, R"(import sys, zlib, h5py
f = h5py.File(sys.argv[1], "r")
m = f["meta"].attrs
assert int(m["format_version"]) == 2 and int(m["step"]) == 42 and m["run_path"] == "configs/tiny.yaml", dict(m)
n = 0
def check(name, obj):
    global n
    if isinstance(obj, h5py.Dataset) and "checksum" in obj.attrs:
        want = "crc32:%08x" % zlib.crc32(obj[()].tobytes())
        assert obj.attrs["checksum"] == want, (name, obj.attrs["checksum"], want)
        n += 1
f.visititems(check)
assert n == 18, n
assert f["params/fc.weight"].shape == (3, 4)
assert f["optimizer"].attrs["type"] == "adamw" and int(f["optimizer"].attrs["step"]) == 42
assert f["data"].attrs["seed"] == 2**64 - 1
assert f["plan"][()].decode() == "stages: 1\n"
print("ok", n)
)");
  std::string cmd = std::string(BRAID_PYTHON) + " " + script + " " + p + " 2>&1";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  char buf[256];
  while (std::fgets(buf, sizeof buf, pipe)) out += buf;
  EXPECT_EQ(::pclose(pipe), 0) << out;
  EXPECT_EQ(out, "ok 18\n");
}

TEST(Checkpoint, ConvertsToATorchStateDict) {
  if (!has_python_module("torch") || !has_python_module("h5py"))
    GTEST_SKIP() << "torch or h5py is not importable by " << BRAID_PYTHON;
  TempDir dir;
  std::string p = dir.file("ck.h5"), pt = dir.file("ck.pt");
  Checkpoint c = sample_checkpoint();
  write_checkpoint(p, c);
  std::string conv = std::string(BRAID_PYTHON) + " " + BRAID_SOURCE_DIR + "/scripts/ckpt_to_torch.py " + p + " -o " + pt +
                     " >" + dir.file("log") + " 2>&1";
  ASSERT_EQ(std::system(conv.c_str()), 0) << read_bytes(dir.file("log"));
  std::string script = dir.file("load.py");
  write_file(script, R"(import sys, torch
sd = torch.load(sys.argv[1])
assert list(sd) == ["big.weight", "fc.bias", "fc.weight", "h.0.attn.in_proj_weight",
                    "bn1.num_batches_tracked", "bn1.running_mean", "emb.empty"], list(sd)
assert sd["fc.weight"].shape == (3, 4) and sd["fc.weight"].dtype == torch.float32
assert sd["h.0.attn.in_proj_weight"].dtype == torch.float64
assert sd["bn1.num_batches_tracked"].dtype == torch.int64 and sd["bn1.num_batches_tracked"].dim() == 0
assert float(sd["fc.weight"][2, 3]) == 11 * 0.25 - 3
print("ok")
)");
  std::string load = std::string(BRAID_PYTHON) + " " + script + " " + pt + " >" + dir.file("log2") + " 2>&1";
  EXPECT_EQ(std::system(load.c_str()), 0) << read_bytes(dir.file("log2"));
}

// A checkpoint whose tensors hold NaN/Inf (checksums valid: saved so) is refused when read for training,
// naming the file and the tensor; `braid inspect` reads it (allow_non_finite) and says which tensors.
TEST(Checkpoint, NonFiniteTensorsAreRefusedAndInspectNamesThem) {
  TempDir dir;
  const std::string p = dir.file("nan.h5");
  Checkpoint c = sample_checkpoint();
  c.params[1].second.data<float>()[2] = std::nanf("");  // fc.bias
  write_checkpoint(p, c);
  std::string e = user_error([&] { read_checkpoint(p); });
  EXPECT_NE(e.find("tensor '/params/fc.bias' in " + p + " holds 1 non-finite value(s) (1 NaN; the first, NaN, at element 2)"),
            std::string::npos) << e;
  ReadOptions wo;
  wo.weights_only = true;  // --init-from reads this way: refused too
  e = user_error([&] { read_checkpoint(p, wo); });
  EXPECT_NE(e.find("/params/fc.bias"), std::string::npos) << e;
  ReadOptions ro;
  ro.allow_non_finite = true;
  Checkpoint r = read_checkpoint(p, ro);
  const std::string text = describe_checkpoint(p, r);
  EXPECT_NE(text.find("NON-FINITE: 1 tensor(s) hold NaN or Inf (/params/fc.bias)"), std::string::npos) << text;
  EXPECT_NE(text.find("1 non-finite value(s)"), std::string::npos) << text;
  // An optimizer state with Inf is refused the same way.
  Checkpoint c2 = sample_checkpoint();
  c2.optimizer[0].value.data<float>()[0] = -std::numeric_limits<float>::infinity();
  write_checkpoint(p, c2);
  e = user_error([&] { read_checkpoint(p); });
  EXPECT_NE(e.find("/optimizer/fc.weight/exp_avg"), std::string::npos) << e;
  EXPECT_NE(e.find("-Inf"), std::string::npos) << e;
}
