// Writing checkpoints: the HDF5 layout of docs/checkpoints.md, written atomically in HDF5 1.10's format, a
// CRC-32 attribute on every tensor, and a header in the user block (checkpoint_header.h) that covers every
// other byte, so that a reader can check a file before HDF5 parses it. Also the helpers the reader shares
// (checkpoint_internal.h). Reading is in checkpoint_read.cpp; folders, `latest` and inspect in checkpoint_dir.cpp.
#include "io/checkpoint.h"

#include "core/resource_error.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "core/parallel.h"
#include "io/checkpoint_header.h"
#include "io/checkpoint_index.h"
#include "io/checkpoint_internal.h"
#include "io/crc32.h"
#include "io/h5util.h"

namespace braid::io {

namespace ckpt {

void bad_file(const std::string& path, const std::string& msg, const std::string& hint) {
  throw UserError(SourceLoc{}, "checkpoint '" + path + "': " + msg, hint);
}

// ---- checksums and hashes -----------------------------------------------------------------------------------

// CRC-32 (io/crc32.h), in pieces on the OpenMP threads for large buffers, joined with zlib's crc32_combine.
uint32_t crc32_of(const void* data, size_t n) {
  constexpr size_t kPiece = size_t{32} << 20;
  const auto* p = static_cast<const unsigned char*>(data);
  if (n <= 2 * kPiece) return crc32(0, p, n);
  const int64_t pieces = static_cast<int64_t>((n + kPiece - 1) / kPiece);
  std::vector<uLong> crcs(static_cast<size_t>(pieces));
  parallel_for(pieces, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      size_t off = static_cast<size_t>(i) * kPiece;
      crcs[static_cast<size_t>(i)] = crc32(0, p + off, std::min(kPiece, n - off));
    }
  });
  uLong c = crcs[0];
  for (int64_t i = 1; i < pieces; ++i) {
    size_t off = static_cast<size_t>(i) * kPiece;
    c = crc32_combine(c, crcs[static_cast<size_t>(i)], static_cast<z_off_t>(std::min(kPiece, n - off)));
  }
  return static_cast<uint32_t>(c);
}

std::string hex(uint64_t v, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%0*" PRIx64, digits, v);
  return buf;
}

std::string checksum_text(uint32_t crc) { return "crc32:" + hex(crc, 8); }

std::string now_iso8601() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// ---- attributes -------------------------------------------------------------------------------------------

void write_scalar_attr(hid_t obj, const std::string& path, const std::string& key, hid_t ftype, hid_t mtype,
                       const void* value) {
  const std::string what = "cannot write attribute '" + key + "'";
  h5::Handle sp = h5::space(H5Screate(H5S_SCALAR), path, what);
  h5::Handle a = h5::attr(H5Acreate2(obj, key.c_str(), ftype, sp.get(), H5P_DEFAULT, H5P_DEFAULT), path, what);
  if (H5Awrite(a.get(), mtype, value) < 0) h5::fail(path, what);
}
void write_attr(hid_t obj, const std::string& path, const std::string& key, int64_t v) {
  write_scalar_attr(obj, path, key, H5T_STD_I64LE, H5T_NATIVE_INT64, &v);
}
void write_attr(hid_t obj, const std::string& path, const std::string& key, uint64_t v) {
  write_scalar_attr(obj, path, key, H5T_STD_U64LE, H5T_NATIVE_UINT64, &v);
}
void write_attr(hid_t obj, const std::string& path, const std::string& key, double v) {
  write_scalar_attr(obj, path, key, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &v);
}
void write_attr(hid_t obj, const std::string& path, const std::string& key, const std::string& v) {
  h5::write_string_attr(obj, path, key, v);
}

// Reads numeric attribute `key` of `obj` (named `shown` in errors) converted to the memory type `mtype`.
void read_number_attr(hid_t obj, const std::string& path, const std::string& shown, const std::string& key,
                      hid_t mtype, void* out) {
  htri_t exists = H5Aexists(obj, key.c_str());
  if (exists < 0) h5::fail(path, "cannot read attribute '" + key + "' of '" + shown + "'");
  if (exists == 0) bad_file(path, "'" + shown + "' has no attribute '" + key + "'");
  const std::string what = "cannot read attribute '" + key + "' of '" + shown + "'";
  h5::Handle a = h5::attr(H5Aopen(obj, key.c_str(), H5P_DEFAULT), path, what);
  h5::Handle ftype = h5::type(H5Aget_type(a.get()), path, what);
  h5::Handle sp = h5::space(H5Aget_space(a.get()), path, what);
  H5T_class_t cls = H5Tget_class(ftype.get());
  if ((cls != H5T_INTEGER && cls != H5T_FLOAT) || H5Sget_simple_extent_type(sp.get()) != H5S_SCALAR)
    bad_file(path, "attribute '" + key + "' of '" + shown + "' is not a number");
  if (H5Aread(a.get(), mtype, out) < 0) h5::fail(path, what);
}
int64_t read_i64_attr(hid_t obj, const std::string& path, const std::string& shown, const std::string& key) {
  int64_t v = 0;
  read_number_attr(obj, path, shown, key, H5T_NATIVE_INT64, &v);
  return v;
}
std::string read_str_attr(hid_t obj, const std::string& path, const std::string& shown, const std::string& key) {
  std::string v;
  if (!h5::read_string_attr(obj, path, key, &v))
    bad_file(path, "'" + shown + "' has no string attribute '" + key + "'");
  return v;
}

// Whether H5Dget_chunk_info* report chunk addresses relative to the HDF5 base address (after the user
// block) rather than to the start of the file: HDF5 1.10.8 does (H5Dget_offset is absolute), later versions
// may not. Found out once per process on a small real file in the first of `dirs` that takes one (file
// images in memory leave the user block out, so they cannot tell); nullopt when none does.
std::optional<bool> chunk_addresses_are_relative(const std::vector<std::string>& dirs) {
  static int relative = -1;
  if (relative >= 0) return relative == 1;
  for (const std::string& dir : dirs) {
    const std::string probe = h5::temp_name((std::filesystem::path(dir.empty() ? "." : dir) / "braid-probe.h5").string());
    const char data[9] = "braid:ab";
    haddr_t addr = HADDR_UNDEF;
    try {
      const std::string what = "cannot probe HDF5's chunk addresses";
      h5::Handle fcpl = h5::plist(H5Pcreate(H5P_FILE_CREATE), probe, what);
      h5::Handle dcpl = h5::plist(H5Pcreate(H5P_DATASET_CREATE), probe, what);
      const hsize_t n = 8;
      if (H5Pset_userblock(fcpl.get(), 512) < 0 || H5Pset_chunk(dcpl.get(), 1, &n) < 0) h5::fail(probe, what);
      h5::Handle f = h5::file(H5Fcreate(probe.c_str(), H5F_ACC_EXCL, fcpl.get(), H5P_DEFAULT), probe, what);
      h5::Handle sp = h5::space(H5Screate_simple(1, &n, nullptr), probe, what);
      h5::Handle ds = h5::dataset(
          H5Dcreate2(f.get(), "x", H5T_STD_U8LE, sp.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT), probe, what);
      hsize_t origin = 0, size = 0;
      unsigned mask = 0;
      if (H5Dwrite(ds.get(), H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0 ||
          H5Dget_chunk_info_by_coord(ds.get(), &origin, &mask, &addr, &size) < 0 || !ds.close() || !f.close())
        h5::fail(probe, what);
    } catch (const UserError&) {
      std::error_code ec;
      std::filesystem::remove(probe, ec);
      continue;
    }
    std::ifstream in(probe, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    std::error_code ec;
    std::filesystem::remove(probe, ec);
    size_t at = bytes.find(std::string(data, 8));
    BRAID_ASSERT(at != std::string::npos && (at == addr || at == addr + 512), "HDF5 chunk address probe: data at ",
                 at, ", chunk address ", addr);
    relative = at == addr ? 0 : 1;
    return relative == 1;
  }
  return std::nullopt;
}

}  // namespace ckpt

// ---- writing ----------------------------------------------------------------------------------------------

namespace {

using namespace ckpt;


struct ToWrite {
  std::string name;  // absolute HDF5 path
  const Tensor* t;
  int group;         // as in the index (checkpoint_index.h)
  std::string rel;   // the name in its group
};

void check_name(const std::string& path, const std::string& what, const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos)
    bad_file(path, what + " name '" + name + "' cannot be stored (empty, '.', '..' or containing '/')");
}

// Every dataset of `c` with its HDF5 path, checked (names, dtypes, duplicates).
std::vector<ToWrite> datasets_of(const std::string& path, const Checkpoint& c, std::vector<Tensor>& rng_tensors) {
  std::vector<ToWrite> out;
  std::set<std::string> seen;
  auto add = [&](int group, const std::string& rel, const Tensor& t) {
    static const char* const kGroups[] = {"/params/", "/buffers/", "/optimizer/", "/rng/"};
    const std::string name = kGroups[group] + rel;
    if (!seen.insert(name).second) bad_file(path, "tensor '" + name + "' is written twice");
    if (!t.defined()) bad_file(path, "tensor '" + name + "' has no data");
    if (h5::file_type(t.dtype()) < 0)
      bad_file(path, "tensor '" + name + "' is " + std::string(dtype_name(t.dtype())) +
                         "; checkpoints store f32, f64, i32 and i64 tensors");
    out.push_back(ToWrite{name, &t, group, rel});
  };
  for (const auto& [name, t] : c.params) {
    check_name(path, "parameter", name);
    add(0, name, t);
  }
  for (const auto& [name, t] : c.buffers) {
    check_name(path, "buffer", name);
    add(1, name, t);
  }
  for (const auto& e : c.optimizer) {
    check_name(path, "optimizer parameter", e.param);
    check_name(path, "optimizer state", e.state);
    add(2, e.param + "/" + e.state, e.value);
  }
  rng_tensors.clear();
  rng_tensors.reserve(c.rng.size());
  for (const auto& r : c.rng) {
    check_name(path, "random stream", r.name);
    Tensor t = Tensor::empty(TensorDesc{Shape{2}, DType::i64});
    std::memcpy(t.data<int64_t>(), &r.key, 8);
    std::memcpy(t.data<int64_t>() + 1, &r.counter, 8);
    rng_tensors.push_back(t);
  }
  for (size_t i = 0; i < c.rng.size(); ++i) add(3, c.rng[i].name, rng_tensors[i]);
  return out;
}

h5::Handle make_group(hid_t file, const std::string& path, const std::string& name) {
  return h5::group(H5Gcreate2(file, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), path,
                   "cannot create group '" + name + "'");
}

void write_plan(hid_t file, const std::string& path, const std::string& text) {
  const std::string what = "cannot write dataset '/plan'";
  h5::Handle ty = h5::type(H5Tcopy(H5T_C_S1), path, what);
  if (H5Tset_size(ty.get(), H5T_VARIABLE) < 0 || H5Tset_cset(ty.get(), H5T_CSET_UTF8) < 0) h5::fail(path, what);
  h5::Handle sp = h5::space(H5Screate(H5S_SCALAR), path, what);
  h5::Handle ds = h5::dataset(H5Dcreate2(file, "/plan", ty.get(), sp.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                              path, what);
  const char* s = text.c_str();
  if (H5Dwrite(ds.get(), ty.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, &s) < 0) h5::fail(path, what);
}

// The checkpoint index (checkpoint_index.h) as the contiguous u8 dataset /index; returns where its bytes lie.
ckpt_header::Range write_index(hid_t file, const std::string& path, const std::string& bytes) {
  const std::string what = "cannot write dataset '/index'";
  const hsize_t n = bytes.size();
  h5::Handle sp = h5::space(H5Screate_simple(1, &n, nullptr), path, what);
  h5::Handle dcpl = h5::plist(H5Pcreate(H5P_DATASET_CREATE), path, what);
  if (H5Pset_layout(dcpl.get(), H5D_CONTIGUOUS) < 0 || H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_EARLY) < 0)
    h5::fail(path, what);
  h5::Handle ds = h5::dataset(H5Dcreate2(file, "/index", H5T_STD_U8LE, sp.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
                              path, what);
  if (H5Dwrite(ds.get(), H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data()) < 0) h5::fail(path, what);
  const haddr_t addr = H5Dget_offset(ds.get());  // absolute
  if (addr == HADDR_UNDEF || H5Dget_storage_size(ds.get()) != n) h5::fail(path, what);
  if (!ds.close()) h5::fail(path, what);
  return {addr, n};
}

// Chunks of about 4 MiB: few enough index entries for fast whole-tensor I/O, small enough for slices.
constexpr size_t kChunkBytes = size_t{4} << 20;

void write_meta(hid_t file, const std::string& path, const CheckpointMeta& m) {
  h5::Handle g = make_group(file, path, "/meta");
  write_attr(g.get(), path, "format_version", static_cast<int64_t>(m.format_version));
  write_attr(g.get(), path, "braid_version", m.braid_version);
  write_attr(g.get(), path, "step", m.step);
  write_attr(g.get(), path, "epoch", m.epoch);
  write_attr(g.get(), path, "samples_seen", m.samples_seen);
  write_attr(g.get(), path, "wall_time_s", m.wall_time_s);
  write_attr(g.get(), path, "created", m.created);
  write_attr(g.get(), path, "run_path", m.run_path);
  write_attr(g.get(), path, "model_path", m.model_path);
  write_attr(g.get(), path, "run_text", m.run_text);
  write_attr(g.get(), path, "model_text", m.model_text);
  write_attr(g.get(), path, "run_hash", m.run_hash);
  write_attr(g.get(), path, "model_hash", m.model_hash);
}

// Where a written dataset's bytes lie in the file: every chunk, or the contiguous block, for the header
// (`out`), and the tensor's bytes in memory order for the index (`pieces`: an edge chunk's valid bytes are
// its prefix, since braid's chunks split only the outer axes, h5::chunk_dims).
void collect_ranges(hid_t ds, const std::string& path, const std::string& name, size_t elem, uint64_t userblock,
                    std::vector<ckpt_header::Range>& out, std::vector<ckpt_index::FileRange>& pieces) {
  const std::string what = "cannot locate the data of dataset '" + name + "'";
  h5::Handle dcpl = h5::plist(H5Dget_create_plist(ds), path, what);
  if (H5Pget_layout(dcpl.get()) != H5D_CHUNKED) {
    haddr_t addr = H5Dget_offset(ds);  // absolute
    const hsize_t size = H5Dget_storage_size(ds);
    if (addr != HADDR_UNDEF && size > 0) {
      out.push_back({addr, size});
      pieces.push_back({addr, size});
    }
    return;
  }
  std::optional<bool> relative = chunk_addresses_are_relative({std::filesystem::path(path).parent_path().string()});
  if (!relative) h5::fail(path, "cannot probe HDF5's chunk addresses in its folder");
  const uint64_t shift = *relative ? userblock : 0;
  h5::Handle sp = h5::space(H5Dget_space(ds), path, what);
  int rank = H5Sget_simple_extent_ndims(sp.get());
  if (rank <= 0) h5::fail(path, what);
  std::vector<hsize_t> dims(static_cast<size_t>(rank)), chunk(static_cast<size_t>(rank)), at(static_cast<size_t>(rank), 0);
  if (H5Sget_simple_extent_dims(sp.get(), dims.data(), nullptr) < 0 || H5Pget_chunk(dcpl.get(), rank, chunk.data()) < 0)
    h5::fail(path, what);
  while (true) {  // every chunk of the grid, row-major
    unsigned mask = 0;
    haddr_t addr = HADDR_UNDEF;
    hsize_t size = 0;
    if (H5Dget_chunk_info_by_coord(ds, at.data(), &mask, &addr, &size) < 0 || addr == HADDR_UNDEF) h5::fail(path, what);
    out.push_back({addr + shift, size});
    uint64_t valid = elem;
    for (int a = 0; a < rank; ++a)
      valid *= std::min(chunk[static_cast<size_t>(a)], dims[static_cast<size_t>(a)] - at[static_cast<size_t>(a)]);
    BRAID_ASSERT(valid <= size, "chunk of dataset '", name, "' smaller than its data");
    pieces.push_back({addr + shift, valid});
    int a = rank - 1;
    for (; a >= 0; --a) {
      at[static_cast<size_t>(a)] += chunk[static_cast<size_t>(a)];
      if (at[static_cast<size_t>(a)] < dims[static_cast<size_t>(a)]) break;
      at[static_cast<size_t>(a)] = 0;
    }
    if (a < 0) return;
  }
}

// Refuses a checkpoint whose tensors alone do not fit in the free space of its disk, before anything is
// written: a clear message instead of a write that fails half way (where HDF5 1.10.8 also leaks its chunk
// buffer). Files that pass can still fail on their metadata or a quota; write_atomically handles that.
void check_free_space(const std::string& path, const std::vector<ToWrite>& datasets, uint64_t userblock) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  struct statvfs vfs {};
  if (::statvfs(dir.empty() ? "." : dir.c_str(), &vfs) != 0) return;  // a missing folder fails at creation
  uint64_t need = userblock;
  for (const auto& w : datasets) need += w.t->bytes();
  const uint64_t avail = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  if (avail < need) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "cannot write: it needs at least %.1f MB and its disk has %.1f MB free",
                  static_cast<double>(need) / 1e6, static_cast<double>(avail) / 1e6);
    throw ResourceError("checkpoint '" + path + "': " + buf +
                        "; free some space, or keep fewer checkpoints (checkpoint.keep)");
  }
}

// An upper bound of the number of data ranges of `t` (its chunks).
size_t max_ranges(const Tensor& t, size_t chunk_bytes) {
  if (t.shape().rank() == 0 || t.numel() == 0) return 1;
  std::vector<hsize_t> chunk = h5::chunk_dims(t.shape(), dtype_size(t.dtype()), chunk_bytes);
  size_t n = 1;
  for (int a = 0; a < t.shape().rank(); ++a)
    n *= static_cast<size_t>((static_cast<hsize_t>(t.shape()[a]) + chunk[static_cast<size_t>(a)] - 1) / chunk[static_cast<size_t>(a)]);
  return n;
}

}  // namespace

std::string text_hash(const std::string& text) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a 64, offset basis
  for (unsigned char ch : text) {
    h ^= ch;
    h *= 0x100000001b3ULL;  // FNV prime
  }
  return ckpt::hex(h, 16);
}

std::string tensor_checksum(const Tensor& t) { return ckpt::checksum_text(ckpt::crc32_of(t.raw(), t.bytes())); }

void write_checkpoint(const std::string& path, const Checkpoint& in) {
  static_assert(std::endian::native == std::endian::little, "the index and the direct reads assume little-endian");
  Checkpoint c = in;  // shares the tensors' memory; only the meta is completed
  c.meta.format_version = kCheckpointFormat;  // whatever the meta was read from: this braid writes its format
  if (c.meta.created.empty()) c.meta.created = now_iso8601();
  if (c.meta.run_hash.empty()) c.meta.run_hash = text_hash(c.meta.run_text);
  if (c.meta.model_hash.empty()) c.meta.model_hash = text_hash(c.meta.model_text);
  std::vector<Tensor> rng_tensors;
  std::vector<ToWrite> datasets = datasets_of(path, c, rng_tensors);  // checks, before any file is touched
  size_t ranges_bound = 0;
  for (const auto& w : datasets) ranges_bound += max_ranges(*w.t, kChunkBytes);
  std::vector<ckpt_header::Range> ranges;
  ckpt_header::Range index_at;
  uint32_t index_crc = 0;
  h5::AtomicWrite how;
  how.format = h5::FileFormat::V110;
  how.userblock = ckpt_header::reserve_bytes(ranges_bound);
  how.after_close = [&](const std::string& tmp) {
    ckpt_header::write(tmp, path, c.meta.format_version, ranges, how.userblock, index_at, index_crc);
  };
  check_free_space(path, datasets, how.userblock);
  ckpt_index::Index index;
  index.meta = c.meta;
  index.optimizer_type = c.optimizer_type;
  index.optimizer_steps = c.optimizer_steps;
  index.loss_scale = c.loss_scale > 0 ? c.loss_scale : 0;
  index.loss_scale_growth_tracker = c.loss_scale > 0 ? c.loss_scale_growth_tracker : 0;
  index.data = c.data;
  index.plan_text = c.plan_text;
  auto guard = h5::lock();
  h5::write_atomically(path, how, [&](hid_t file) {
    write_attr(file, path, "format", std::string("braid-checkpoint"));
    write_meta(file, path, c.meta);
    for (const char* g : {"/params", "/buffers", "/rng"}) make_group(file, path, g);
    {
      h5::Handle opt = make_group(file, path, "/optimizer");
      write_attr(opt.get(), path, "type", c.optimizer_type);
      write_attr(opt.get(), path, "step", c.optimizer_steps);
      if (c.loss_scale > 0) {
        write_attr(opt.get(), path, "loss_scale", c.loss_scale);
        write_attr(opt.get(), path, "loss_scale_growth_tracker", c.loss_scale_growth_tracker);
      }
    }
    // The disk starts writing each tensor while the next one is checksummed and copied (sync_file_range
    // only starts writeback; the fsync at the end waits for it). With the sec2 driver the handle is the fd.
    int* fd = nullptr;
    if (H5Fget_vfd_handle(file, H5P_DEFAULT, reinterpret_cast<void**>(&fd)) < 0) fd = nullptr;
    for (const auto& w : datasets) {
      ckpt_index::TensorEntry e{w.group, w.rel, w.t->desc(), crc32_of(w.t->raw(), w.t->bytes()), {}};
      h5::Handle ds = h5::write_dataset(file, path, w.name, *w.t, kChunkBytes);
      write_attr(ds.get(), path, "checksum", checksum_text(e.crc));
      if (fd && w.t->bytes() >= (size_t{1} << 20)) ::sync_file_range(*fd, 0, 0, SYNC_FILE_RANGE_WRITE);
      collect_ranges(ds.get(), path, w.name, dtype_size(w.t->dtype()), how.userblock, ranges, e.pieces);
      if (!ds.close()) h5::fail(path, "cannot write dataset '" + w.name + "'");
      index.tensors.push_back(std::move(e));
    }
    {
      h5::Handle data = make_group(file, path, "/data");
      write_attr(data.get(), path, "epoch", c.data.epoch);
      write_attr(data.get(), path, "position", c.data.position);
      write_attr(data.get(), path, "seed", c.data.seed);
    }
    write_plan(file, path, c.plan_text);
    // In the order HDF5 lists them (by group, then name level by level), as a reader through HDF5 returns them.
    auto key = [](const ckpt_index::TensorEntry& e) {
      const size_t slash = e.rel.find('/');
      return std::make_tuple(e.group, e.rel.substr(0, slash), slash == std::string::npos ? "" : e.rel.substr(slash + 1));
    };
    std::stable_sort(index.tensors.begin(), index.tensors.end(),
                     [&](const auto& a, const auto& b) { return key(a) < key(b); });
    const std::string bytes = ckpt_index::encode(index);
    index_crc = crc32(0, bytes.data(), bytes.size());
    index_at = write_index(file, path, bytes);
  });
}

std::vector<std::string> compare_to_model(const Checkpoint& c,
                                          const std::vector<std::pair<std::string, TensorDesc>>& expected) {
  std::map<std::string, TensorDesc> have;
  for (const auto* group : {&c.params, &c.buffers})
    for (const auto& [name, t] : *group) have.emplace(name, t.desc());
  std::vector<std::string> out;
  std::set<std::string> wanted;
  for (const auto& [name, desc] : expected) {
    wanted.insert(name);
    auto it = have.find(name);
    if (it == have.end())
      out.push_back("tensor '" + name + "' (" + desc.str() + ") of the model is not in the checkpoint");
    else if (it->second != desc)
      out.push_back("tensor '" + name + "': the checkpoint has " + it->second.str() + ", the model " + desc.str());
  }
  for (const auto* group : {&c.params, &c.buffers})
    for (const auto& [name, t] : *group)
      if (!wanted.count(name))
        out.push_back("tensor '" + name + "' (" + t.desc().str() + ") of the checkpoint is not in the model");
  return out;
}

}  // namespace braid::io
