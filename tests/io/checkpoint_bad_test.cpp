// Bad checkpoints at the io level: missing, empty, non-HDF5 and truncated files, bytes flipped inside a
// tensor's data (found through HDF5's chunk index) and anywhere in the file, missing groups and checksums,
// a newer format version, a `latest` pointing nowhere or holding garbage, a read-only folder and a full disk
// (a tmpfs). Each ends in a UserError naming the file (and the tensor where one is at fault), never a crash
// or a silently different checkpoint; failed saves leave the previous checkpoint and `latest` intact.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <random>
#include <tuple>

#include "checkpoint_test_util.h"
#include "core/resource_error.h"
#include "io/checkpoint_header.h"
#include "io/h5file.h"
#include "io_test_util.h"

using namespace braid;
using namespace braid::io;
using namespace braid::io::testing;
namespace fs = std::filesystem;

namespace {

// The UserError of reading `path`, which must name it.
std::string read_error(const std::string& path, const ReadOptions& o = {}) {
  std::string e = user_error([&] { read_checkpoint(path, o); });
  EXPECT_NE(e.find(path), std::string::npos) << "the message does not name the file: " << e;
  return e;
}

void xor_byte(const std::string& path, int64_t offset, unsigned char mask) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f) << path;
  f.seekg(offset);
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(static_cast<unsigned char>(c) ^ mask);
  f.seekp(offset);
  f.write(&c, 1);
}

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// Removes an HDF5 link or attribute with the raw C API (a damaged or hand-made file).
void h5_delete(const std::string& path, const std::string& link, const std::string& attr = "") {
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  if (attr.empty()) EXPECT_GE(H5Ldelete(f, link.c_str(), H5P_DEFAULT), 0);
  else EXPECT_GE(H5Adelete_by_name(f, link.c_str(), attr.c_str(), H5P_DEFAULT), 0);
  H5Fclose(f);
}

}  // namespace

TEST(CheckpointBad, MissingEmptyAndNonHdf5Files) {
  TempDir dir;
  EXPECT_NE(read_error(dir.file("none.h5")).find("cannot open: No such file"), std::string::npos);
  write_file(dir.file("empty.h5"), "");
  EXPECT_NE(read_error(dir.file("empty.h5")).find("is empty (0 bytes)"), std::string::npos);
  write_file(dir.file("text.h5"), "model: tiny\nthis is not a checkpoint\n");
  EXPECT_NE(read_error(dir.file("text.h5")).find("is not an HDF5 file"), std::string::npos);
  std::string noise(4096, '\0');
  std::mt19937 rng(1);
  for (auto& ch : noise) ch = static_cast<char>(rng());
  write_file(dir.file("noise.h5"), noise);
  EXPECT_NE(read_error(dir.file("noise.h5")).find("is not an HDF5 file"), std::string::npos);
  EXPECT_NE(read_error(dir.path()).find("is a folder"), std::string::npos);
}

TEST(CheckpointBad, TruncatedFiles) {
  TempDir dir;
  std::string good = dir.file("good.h5");
  write_checkpoint(good, sample_checkpoint());
  const std::string bytes = read_bytes(good);
  for (size_t len : {size_t{8}, size_t{100}, size_t{2000}, bytes.size() / 2, bytes.size() - 1}) {
    SCOPED_TRACE(len);
    std::string p = dir.file("cut" + std::to_string(len) + ".h5");
    write_file(p, bytes.substr(0, len));
    std::string e = read_error(p);
    EXPECT_TRUE(e.find("truncated") != std::string::npos || e.find("not an HDF5 file") != std::string::npos) << e;
  }
  std::string p = dir.file("cut_header.h5");  // inside the header: the user block's size is still readable
  write_file(p, bytes.substr(0, 40));
  EXPECT_NE(read_error(p).find("is truncated (40 bytes, shorter than its 2048-byte header)"), std::string::npos);
}

TEST(CheckpointBad, BytesFlippedInsideATensorAreACorruptTensor) {
  TempDir dir;
  std::string p = dir.file("ck.h5");
  Checkpoint c = sample_checkpoint();
  write_checkpoint(p, c);
  // A chunked parameter, an optimizer state, and a scalar buffer (contiguous).
  const std::vector<std::pair<std::string, Tensor>> targets = {
      {"/params/big.weight", c.params[3].second},
      {"/optimizer/h.0.attn.in_proj_weight/exp_avg_sq", c.optimizer[5].value},
      {"/buffers/bn1.num_batches_tracked", c.buffers[1].second}};
  for (const auto& [name, t] : targets) {
    SCOPED_TRACE(name);
    std::string q = dir.file("flip.h5");
    fs::copy_file(p, q, fs::copy_options::overwrite_existing);
    int64_t off = data_offset(q, t);
    ASSERT_GT(off, 0);
    xor_byte(q, off + std::min<int64_t>(5, static_cast<int64_t>(t.bytes()) - 1), 0x10);  // one bit
    std::string e = read_error(q);
    EXPECT_NE(e.find("tensor '" + name + "' in " + q + " is corrupt (checksum mismatch"), std::string::npos) << e;
    // Unverified, it reads (this is what the checksum protects against).
    EXPECT_NO_THROW(read_checkpoint(q, ReadOptions{.verify_checksums = false}));
  }
}

TEST(CheckpointBad, RunTextFlippedIsCorruptMetadata) {
  TempDir dir;
  std::string p = dir.file("ck.h5");
  Checkpoint c = sample_checkpoint();
  write_checkpoint(p, c);
  std::string bytes = read_bytes(p);
  size_t at = bytes.find("train: {batch: 32}");
  ASSERT_NE(at, std::string::npos);
  xor_byte(p, static_cast<int64_t>(at) + 16, 0x01);  // "batch: 32" -> "batch: 33": same length, other text
  std::string e = read_error(p);
  EXPECT_NE(e.find("is corrupt: its HDF5 structure (everything but tensor data) fails its checksum"), std::string::npos)
      << e;
  e = user_error([&] { read_checkpoint_meta(p); });
  EXPECT_NE(e.find("is corrupt"), std::string::npos) << e;
  // Unverified, HDF5 reads the changed text: the header is what catches it.
  EXPECT_NE(read_checkpoint(p, ReadOptions{.verify_checksums = false}).meta.run_text.find("batch: 33"), std::string::npos);
}

// Issue 42's acceptance: 10,000 random byte flips and truncations of a checkpoint, spread over its header
// text, the rest of its header block, the HDF5 structure, the index and the tensor data. Reading either fails
// with a UserError naming the file or returns exactly what was written (a byte no tensor uses, such as an edge
// chunk's slack). Never a crash (the sanitizer builds run this too), never a silently different checkpoint.
TEST(CheckpointBad, TenThousandFlipsAndTruncationsNeverGoUnnoticed) {
  TempDir dir;
  std::string p = dir.file("ck.h5");
  Checkpoint c = sample_checkpoint(42, 2);
  write_checkpoint(p, c);
  Checkpoint ref = read_checkpoint(p);
  const std::string bytes = read_bytes(p);
  const ckpt_header::Header h = ckpt_header::verify(p, kCheckpointFormat);
  const size_t text_end = bytes.find("header-crc32 ") + 22;
  // The regions: [begin, end) of each kind of byte.
  std::vector<std::pair<uint64_t, uint64_t>> data, structure;
  uint64_t at = h.userblock;
  for (const auto& r : h.raw) {
    if (r.offset > at) structure.push_back({at, r.offset});
    data.push_back({r.offset, r.offset + r.size});
    at = r.offset + r.size;
  }
  if (at < h.size) structure.push_back({at, h.size});
  const std::vector<std::vector<std::pair<uint64_t, uint64_t>>> regions = {
      {{0, text_end}}, {{text_end, h.userblock}}, structure, {{h.index.offset, h.index.offset + h.index.size}}, data};
  const char* names[] = {"header text", "header padding", "HDF5 structure", "index", "tensor data", "truncation"};
  std::mt19937_64 rng(12345);
  int refused[6] = {0}, identical[6] = {0};
  const int trials = 10000;
  std::string q = dir.file("fuzz.h5");
  for (int k = 0; k < trials; ++k) {
    const int kind = k % 6;
    std::string m = bytes;
    std::string what;
    if (kind == 5) {
      m.resize(static_cast<size_t>(rng() % bytes.size()));
      what = "cut to " + std::to_string(m.size());
    } else {
      const auto& spans = regions[static_cast<size_t>(kind)];
      const auto& span = spans[rng() % spans.size()];
      const int flips = rng() % 4 == 0 ? 1 + static_cast<int>(rng() % 8) : 1;  // mostly one byte, some bursts
      for (int f = 0; f < flips; ++f) {
        uint64_t off = span.first + rng() % (span.second - span.first);
        m[off] = static_cast<char>(static_cast<unsigned char>(m[off]) ^ (1 + rng() % 255));
        what += " " + std::to_string(off);
      }
    }
    SCOPED_TRACE(std::string(names[kind]) + ":" + what);
    write_file(q, m);
    try {
      Checkpoint r = read_checkpoint(q);
      ++identical[kind];
      expect_same_checkpoint(ref, r);
      EXPECT_EQ(ref.meta.created, r.meta.created);
      EXPECT_EQ(ref.meta.run_hash, r.meta.run_hash);
      EXPECT_EQ(ref.meta.model_hash, r.meta.model_hash);
    } catch (const UserError& e) {
      ++refused[kind];
      EXPECT_NE(e.format().find(q), std::string::npos) << e.format();
    }
    if (::testing::Test::HasFailure()) break;
  }
  for (int kind = 0; kind < 6; ++kind) {
    std::printf("%-15s %5d refused, %d read identical\n", names[kind], refused[kind], identical[kind]);
    if (kind < 4 || kind == 5) EXPECT_EQ(identical[kind], 0) << names[kind];  // every such byte is checked
  }
}

// A crafted file: bytes changed and every checksum recomputed, as anyone can. The reader decodes the index
// with bounds on everything and never hands the bytes to HDF5: a UserError or a checkpoint, never a crash,
// and never an allocation beyond the file's size (the sanitizer builds run this too).
TEST(CheckpointBad, CraftedFilesWithValidChecksumsNeverCrashTheReader) {
  TempDir dir;
  std::string p = dir.file("ck.h5");
  write_checkpoint(p, sample_checkpoint(42, 2));
  const std::string bytes = read_bytes(p);
  const ckpt_header::Header h = ckpt_header::verify(p, kCheckpointFormat);
  std::mt19937_64 rng(7);
  std::string q = dir.file("crafted.h5");
  int refused = 0, read = 0, unsealed = 0;
  for (int k = 0; k < 3000; ++k) {
    std::string m = bytes;
    // Mostly the index (its lengths, counts, shapes and offsets), some anywhere.
    const bool in_index = k % 4 != 0;
    const uint64_t base = in_index ? h.index.offset : 0, span = in_index ? h.index.size : bytes.size();
    for (int f = 0, n = 1 + static_cast<int>(rng() % 4); f < n; ++f) {
      uint64_t off = base + rng() % span;
      m[off] = static_cast<char>(k % 3 == 0 ? rng() : static_cast<unsigned char>(m[off]) ^ (1u << (rng() % 8)));
    }
    write_file(q, m);
    if (!ckpt_header::reseal(q)) {
      ++unsealed;
      continue;
    }
    try {
      read_checkpoint(q);
      read_checkpoint(q, ReadOptions{.weights_only = true});
      ++read;
    } catch (const UserError& e) {
      ++refused;
      EXPECT_NE(e.format().find(q), std::string::npos) << e.format();
    }
  }
  std::printf("3000 crafted files: %d refused, %d read, %d with a header that no longer parses\n", refused, read,
              unsealed);
  EXPECT_GT(refused, 1000);
}

// From format 2 on, braid reads a checkpoint through its own index: with HDF5's superblock destroyed (and the
// checksums recomputed), it still reads, so HDF5 never parsed it. Tools that use HDF5 (and braid's unverified
// path) see a broken file.
TEST(CheckpointBad, ReadsThroughItsIndexWithoutHDF5) {
  TempDir dir;
  std::string p = dir.file("ck.h5");
  Checkpoint c = sample_checkpoint();
  write_checkpoint(p, c);
  const ckpt_header::Header h = ckpt_header::verify(p, kCheckpointFormat);
  EXPECT_TRUE(h.has_index);
  EXPECT_EQ(h.format, 2);
  for (int i = 0; i < 8; ++i) xor_byte(p, static_cast<int64_t>(h.userblock) + i, 0xff);  // "\x89HDF\r\n\x1a\n"
  EXPECT_NE(read_error(p).find("fails its checksum"), std::string::npos);
  ASSERT_TRUE(ckpt_header::reseal(p));
  Checkpoint r = read_checkpoint(p);
  expect_same_checkpoint(c, r);
  EXPECT_EQ(read_checkpoint_meta(p).step, c.meta.step);
  EXPECT_THROW(read_checkpoint(p, ReadOptions{.verify_checksums = false}), UserError);
}

// The header block after the header's last line is zeros; a byte there is damage like any other.
TEST(CheckpointBad, HeaderPaddingIsChecked) {
  TempDir dir;
  std::string p = dir.file("ck.h5");
  write_checkpoint(p, sample_checkpoint(42, 2));
  const std::string bytes = read_bytes(p);
  const size_t text_end = bytes.find("header-crc32 ") + 22;
  xor_byte(p, static_cast<int64_t>(text_end) + 100, 0x20);
  EXPECT_NE(read_error(p).find("its header is corrupt (byte " + std::to_string(text_end + 100) + " after it is not zero)"),
            std::string::npos);
}

// Files changed after writing (here through HDF5 itself, as a tool might): verified, the header refuses
// them; unverified (ReadOptions::verify_checksums off, for hand-made files), the reader names what is missing.
TEST(CheckpointBad, MissingGroupsMetaAndChecksums) {
  TempDir dir;
  std::string p = dir.file("ck.h5");
  write_checkpoint(p, sample_checkpoint());
  const ReadOptions unverified{.verify_checksums = false};
  auto changed = [&](const std::string& name, const std::string& link, const std::string& attr, const std::string& expected) {
    SCOPED_TRACE(name);
    std::string q = dir.file(name);
    fs::copy_file(p, q, fs::copy_options::overwrite_existing);
    h5_delete(q, link, attr);
    std::string e = read_error(q);
    EXPECT_TRUE(e.find("is corrupt") != std::string::npos || e.find("more than were written") != std::string::npos ||
                e.find("is truncated") != std::string::npos)
        << e;
    if (expected.empty()) EXPECT_NO_THROW(read_checkpoint(q, unverified));
    else EXPECT_NE(read_error(q, unverified).find(expected), std::string::npos);
  };
  for (const std::string group : {"/params", "/buffers", "/optimizer", "/rng", "/data"})
    changed("no" + group.substr(1) + ".h5", group, "", "has no group '" + group + "'");
  changed("nometa.h5", "/meta", "", "is not a braid checkpoint (it has no /meta group)");
  changed("nostep.h5", "/meta", "step", "'/meta' has no attribute 'step'");
  changed("nochecksum.h5", "/params/fc.weight", "checksum", "");  // unverified, a missing checksum is not looked for
  // A weights file (`braid train --save-init`) is not a checkpoint.
  write_tensors(dir.file("w.h5"), {{"/params/fc.weight", ramp(Shape{2, 2}, DType::f32)}});
  EXPECT_NE(read_error(dir.file("w.h5")).find("is not a braid checkpoint"), std::string::npos);
  EXPECT_NE(read_error(dir.file("w.h5"), unverified).find("is not a braid checkpoint (it has no /meta group)"),
            std::string::npos);
}

TEST(CheckpointBad, NewerFormatIsRefused) {
  TempDir dir;
  // The header's format line is read before anything else is trusted (a newer layout may differ).
  for (const auto& [file, digit, expected] :
       {std::tuple{"new.h5", '3', "written by a newer braid (format 3; this braid reads format 2 and older)"},
        std::tuple{"zero.h5", '0', "its header is corrupt"}}) {
    std::string p = dir.file(file);
    write_checkpoint(p, sample_checkpoint());
    const std::string bytes = read_bytes(p);
    const size_t at = bytes.find("\nformat 2\n");
    ASSERT_NE(at, std::string::npos);
    xor_byte(p, static_cast<int64_t>(at) + 8, static_cast<unsigned char>('2' ^ digit));
    std::string e = read_error(p);
    EXPECT_NE(e.find(expected), std::string::npos) << e;
  }
}

TEST(CheckpointBad, UnstorableContentIsRefusedBeforeWriting) {
  TempDir dir;
  std::string p = dir.file("ck.h5");
  auto expect_refused = [&](const Checkpoint& c, const std::string& what) {
    std::string e = user_error([&] { write_checkpoint(p, c); });
    EXPECT_NE(e.find(p), std::string::npos) << e;
    EXPECT_NE(e.find(what), std::string::npos) << e;
    EXPECT_FALSE(fs::exists(p));
    EXPECT_TRUE(names_in(dir.path()).empty());
  };
  Checkpoint c;
  c.params = {{"fc.weight", Tensor::empty({Shape{2}, DType::bf16})}};
  expect_refused(c, "tensor '/params/fc.weight' is bf16");
  c.params = {{"a/b", ramp(Shape{2}, DType::f32)}};
  expect_refused(c, "parameter name 'a/b' cannot be stored");
  c.params = {{"w", ramp(Shape{2}, DType::f32)}, {"w", ramp(Shape{2}, DType::f32)}};
  expect_refused(c, "tensor '/params/w' is written twice");
  std::string e = user_error([&] { write_checkpoint(dir.file("no/such/folder/ck.h5"), sample_checkpoint()); });
  EXPECT_NE(e.find(dir.file("no/such/folder/ck.h5")), std::string::npos) << e;
}

TEST(CheckpointBad, LatestPointingNowhereOrHoldingGarbage) {
  TempDir dir;
  CheckpointDir cd(dir.path(), 3);
  cd.save(sample_checkpoint(1, 2));
  const std::string latest = dir.file("latest");
  struct Case {
    std::string content, expected;
  };
  std::vector<Case> cases = {
      {"step_00000009.h5\n", "names 'step_00000009.h5', which does not exist in '" + dir.path() + "'"},
      {std::string("\x89HDF\r\n\x1a\n\0\0", 10), "does not name a checkpoint file (it holds '\\x89HDF\\x0d"},
      {"", "does not name a checkpoint file (it holds '')"},
      {"../other/step_00000001.h5\n", "does not name a checkpoint file"},
      {"/etc/passwd\n", "does not name a checkpoint file"},
      {"step_00000001.h5\nstep_00000002.h5\n", "does not name a checkpoint file"},
      {std::string(5000, 'x'), "does not name a checkpoint file"},
  };
  for (const auto& k : cases) {
    SCOPED_TRACE(k.content.substr(0, 40));
    write_file(latest, k.content);
    std::string e = user_error([&] { cd.latest(); });
    EXPECT_EQ(e.rfind(latest + ": error: ", 0), 0u) << e;  // names the file
    EXPECT_NE(e.find(k.expected), std::string::npos) << e;
    e = user_error([&] { CheckpointDir::resolve(dir.path(), "latest"); });
    EXPECT_NE(e.find(latest), std::string::npos) << e;
  }
  fs::remove(latest);
  fs::create_directory(latest);  // not a file
  EXPECT_NE(user_error([&] { cd.latest(); }).find("is not a regular file"), std::string::npos);
  fs::remove(latest);
  // A save repairs it: `latest` is rewritten whatever it held.
  write_file(latest, "garbage");
  cd.save(sample_checkpoint(2, 2));
  EXPECT_EQ(cd.latest(), dir.file("step_00000002.h5"));
}

// A crash between the checkpoint file and `latest` (or in the middle of either) leaves `latest` naming the
// previous complete checkpoint.
TEST(CheckpointBad, CrashBeforeLatestMovesKeepsThePreviousCheckpoint) {
  TempDir dir;
  CheckpointDir cd(dir.path(), 3);
  std::string first = cd.save(sample_checkpoint(1, 2));
  write_file(dir.file(".step_00000002.h5.tmp-1-0"), read_bytes(first).substr(0, 3000));  // partial write
  write_file(dir.file(".latest.tmp-1-0"), "step_0000");                                 // partial pointer
  EXPECT_EQ(cd.latest(), first);
  EXPECT_EQ(read_checkpoint(cd.latest()).meta.step, 1);
  EXPECT_EQ(CheckpointDir::resolve(dir.path(), "latest"), first);
}

TEST(CheckpointBad, ReadOnlyFolderLeavesPreviousCheckpointIntact) {
  TempDir dir;
  std::string d = dir.file("ckpts");
  CheckpointDir cd(d, 3);
  std::string first = cd.save(sample_checkpoint(1, 2));
  fs::permissions(dir.path(), fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                  fs::perms::others_read | fs::perms::others_exec);
  fs::permissions(d, fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read | fs::perms::group_exec |
                         fs::perms::others_read | fs::perms::others_exec);
  // As root, permissions do not stop writes: act as `nobody` (effective uid only, restored after).
  struct Euid {
    bool changed = false;
    ~Euid() {
      if (changed) {
        EXPECT_EQ(::seteuid(0), 0);
      }
    }
  } euid;
  if (::geteuid() == 0) {
    if (::seteuid(65534) != 0) GTEST_SKIP() << "running as root and cannot drop to uid 65534: " << std::strerror(errno);
    euid.changed = true;
  }
  if (::faccessat(AT_FDCWD, d.c_str(), W_OK, AT_EACCESS) == 0) GTEST_SKIP() << "the read-only folder is writable anyway (capabilities?)";
  std::string e = user_error([&] { cd.save(sample_checkpoint(2, 2)); });
  EXPECT_NE(e.find(d + "/step_00000002.h5"), std::string::npos) << e;
  EXPECT_NE(e.find("Permission denied"), std::string::npos) << e;
  EXPECT_EQ(cd.latest(), first);
  if (euid.changed) {
    EXPECT_EQ(::seteuid(0), 0);
    euid.changed = false;
  }
  EXPECT_EQ(names_in(d), (std::vector<std::string>{"latest", "step_00000001.h5"}));
  expect_same_checkpoint(sample_checkpoint(1, 2), read_checkpoint(first));
}

// A full disk is not a mistake in the user's files but the machine's failure: ResourceError (exit status 1).
std::string resource_error(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ResourceError& e) {
    return e.what();
  } catch (const UserError& e) {
    ADD_FAILURE() << "a full disk is a ResourceError, not a UserError: " << e.format();
    return e.format();
  }
  ADD_FAILURE() << "expected a ResourceError";
  return "";
}

// Past the file-size limit (ulimit -f; braid's main ignores SIGXFSZ, as this test does): the save fails as on a
// full disk, a ResourceError (exit 1) naming the checkpoint, with no temporary left and the previous intact.
TEST(CheckpointBad, FileSizeLimitIsHandledAsAFullDisk) {
  TempDir dir;
  const std::string d = dir.file("ck");
  CheckpointDir cd(d, 3);
  const std::string first = cd.save(sample_checkpoint(1, 2));
  struct rlimit old {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old;
  small.rlim_cur = 1 << 20;  // the next checkpoint has 3.7 MB of tensors
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const std::string e = resource_error([&] { cd.save(sample_checkpoint(2, 300)); });
  ::setrlimit(RLIMIT_FSIZE, &old);
  ::signal(SIGXFSZ, old_handler);
  EXPECT_NE(e.find(d + "/step_00000002.h5"), std::string::npos) << e;
  EXPECT_NE(e.find("File too large"), std::string::npos) << e;
  EXPECT_EQ(names_in(d), (std::vector<std::string>{"latest", "step_00000001.h5"}));
  EXPECT_EQ(cd.latest(), first);
  expect_same_checkpoint(sample_checkpoint(1, 2), read_checkpoint(first));
}

TEST(CheckpointBad, FullDiskLeavesPreviousCheckpointIntact) {
  TempDir dir;
  std::string d = dir.file("small");
  fs::create_directory(d);
  if (::mount("tmpfs", d.c_str(), "tmpfs", 0, "size=256k") != 0)
    GTEST_SKIP() << "cannot mount a 256 KiB tmpfs (needs root with CAP_SYS_ADMIN): " << std::strerror(errno);
  struct Unmount {
    std::string d;
    ~Unmount() { ::umount2(d.c_str(), MNT_DETACH); }
  } unmount{d};
  CheckpointDir cd(d, 3);
  std::string first = cd.save(sample_checkpoint(1, 2));  // a few tens of KiB
  struct statvfs vfs {};
  ASSERT_EQ(::statvfs(d.c_str(), &vfs), 0);
  const int64_t free_bytes = static_cast<int64_t>(vfs.f_bavail * vfs.f_frsize);
  // 300 rows (3.7 MB of tensors) are refused before writing; the other size has tensors that just fit, so
  // the disk fills while HDF5 writes the rest.
  for (int64_t rows : {int64_t{300}, (free_bytes - 12 * 1024) / (3 * 4096)}) {
    SCOPED_TRACE(rows);
    const size_t fds = names_in("/proc/self/fd").size();
    std::string e = resource_error([&] { cd.save(sample_checkpoint(2, rows)); });
    EXPECT_NE(e.find(d + "/step_00000002.h5"), std::string::npos) << e;
    if (rows == 300) EXPECT_NE(e.find("cannot write: it needs at least 3.7 MB and its disk has 0."), std::string::npos) << e;
    else EXPECT_NE(e.find("No space left on device"), std::string::npos) << e;
    EXPECT_EQ(names_in("/proc/self/fd").size(), fds);  // the temporary is closed, so its space is free again
    EXPECT_EQ(cd.latest(), first);
    EXPECT_EQ(names_in(d), (std::vector<std::string>{"latest", "step_00000001.h5"}));  // no temporary left
    expect_same_checkpoint(sample_checkpoint(1, 2), read_checkpoint(first));
  }
  // The disk fills at every point of a save: tensor data, metadata, the space reserved for closing. Each
  // save either fails cleanly or succeeds (and is then undone here).
  const int64_t edge = free_bytes / (3 * 4096);
  std::map<std::string, int> outcomes;
  for (int64_t rows = edge - 12; rows <= edge + 2; ++rows) {
    SCOPED_TRACE("sweep " + std::to_string(rows));
    const size_t fds = names_in("/proc/self/fd").size();
    try {
      cd.save(sample_checkpoint(2, rows));
      expect_same_checkpoint(sample_checkpoint(2, rows), read_checkpoint(cd.latest()));
      fs::remove(d + "/step_00000002.h5");
      write_file(d + "/latest", "step_00000001.h5\n");
      ++outcomes["saved"];
    } catch (const ResourceError& e) {  // a full disk: the machine's failure, exit status 1
      std::string m = e.what();
      EXPECT_NE(m.find(d + "/step_00000002.h5"), std::string::npos) << m;
      ++outcomes[m.substr(m.find("': ") + 3, m.find(" '", m.find("': ") + 3) - m.find("': ") - 3)];
    }
    EXPECT_EQ(names_in("/proc/self/fd").size(), fds);
    EXPECT_EQ(cd.latest(), first);
    EXPECT_EQ(names_in(d), (std::vector<std::string>{"latest", "step_00000001.h5"}));
  }
  for (const auto& [what, n] : outcomes) std::printf("full disk sweep: %d x %s\n", n, what.c_str());
  expect_same_checkpoint(sample_checkpoint(1, 2), read_checkpoint(first));
  // With room again, the next save works.
  std::string second = cd.save(sample_checkpoint(3, 2));
  EXPECT_EQ(cd.latest(), second);
}
