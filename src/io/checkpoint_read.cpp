// Reading checkpoints. The file is checked before HDF5 parses it (checkpoint_header.h); HDF5 then gives the
// meta, the small state and where every tensor's bytes lie, and the bytes themselves are read with pread on
// several threads straight into the tensors, each piece checksummed as it arrives (HDF5's own reads are
// serial and copy twice). Datasets laid out otherwise than braid writes them (another tool's file, filters,
// another byte order) are read through HDF5 instead. Every tensor's CRC-32 is checked before anything is
// returned; the first corrupt one, in file-group order, is named in the error.
#include <cmath>
#include <fcntl.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <mutex>
#include <thread>

#include "io/checkpoint.h"
#include "core/finite.h"
#include "io/checkpoint_header.h"
#include "io/checkpoint_index.h"
#include "io/checkpoint_internal.h"
#include "io/crc32.h"
#include "io/h5util.h"

namespace braid::io {

namespace {

using namespace ckpt;

// Refuses, with a message naming the file, what HDF5 should not be asked to open: a missing, empty or
// non-HDF5 file, and (when verifying) one whose header, size or HDF5 structure does not match what was written.
std::optional<ckpt_header::Header> precheck(const std::string& path, bool verify) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) bad_file(path, std::string("cannot open: ") + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) bad_file(path, "is a folder, not a checkpoint file");
  if (!S_ISREG(st.st_mode)) bad_file(path, "is not a regular file");
  if (st.st_size == 0) bad_file(path, "is empty (0 bytes), not a checkpoint");
  char head[17] = {0};
  if (FILE* f = std::fopen(path.c_str(), "rb")) {
    size_t n = std::fread(head, 1, sizeof head - 1, f);
    (void)n;
    std::fclose(f);
  }
  bool ours = std::strncmp(head, "braid checkpoint", 16) == 0;
  if (!ours || !verify) {
    htri_t is_h5 = H5Fis_hdf5(path.c_str());  // looks for the signature only
    if (is_h5 < 0) h5::fail(path, "cannot open for reading");
    if (is_h5 == 0) bad_file(path, "is not an HDF5 file (no HDF5 signature), so not a braid checkpoint");
  }
  if (!verify) return std::nullopt;
  return ckpt_header::verify(path, kCheckpointFormat);
}

bool has_link(hid_t loc, const std::string& path, const std::string& name) {
  htri_t r = H5Lexists(loc, name.c_str(), H5P_DEFAULT);
  if (r < 0) h5::fail(path, "cannot look up '" + name + "'");
  return r > 0;
}

h5::Handle open_group(hid_t file, const std::string& path, const std::string& name) {
  if (!has_link(file, path, name))
    bad_file(path, "has no group '" + name + "'", "the file is damaged or was not written by braid");
  return h5::group(H5Gopen2(file, name.c_str(), H5P_DEFAULT), path, "cannot open group '" + name + "'");
}

CheckpointMeta read_meta(hid_t file, const std::string& path) {
  if (!has_link(file, path, "/meta"))
    bad_file(path, "is not a braid checkpoint (it has no /meta group)",
             "braid checkpoints are written by `braid train` with checkpoint.dir set");
  h5::Handle g = open_group(file, path, "/meta");
  const hid_t m = g.get();
  CheckpointMeta meta;
  int64_t version = read_i64_attr(m, path, "/meta", "format_version");
  if (version > kCheckpointFormat)
    bad_file(path, "written by a newer braid (format " + std::to_string(version) + "; this braid reads format " +
                       std::to_string(kCheckpointFormat) + " and older)",
             "use a newer braid to read it");
  if (version < 1) bad_file(path, "has an invalid format version " + std::to_string(version));
  meta.format_version = static_cast<int>(version);
  meta.braid_version = read_str_attr(m, path, "/meta", "braid_version");
  meta.step = read_i64_attr(m, path, "/meta", "step");
  meta.epoch = read_i64_attr(m, path, "/meta", "epoch");
  meta.samples_seen = read_i64_attr(m, path, "/meta", "samples_seen");
  read_number_attr(m, path, "/meta", "wall_time_s", H5T_NATIVE_DOUBLE, &meta.wall_time_s);
  meta.created = read_str_attr(m, path, "/meta", "created");
  meta.run_path = read_str_attr(m, path, "/meta", "run_path");
  meta.model_path = read_str_attr(m, path, "/meta", "model_path");
  meta.run_text = read_str_attr(m, path, "/meta", "run_text");
  meta.model_text = read_str_attr(m, path, "/meta", "model_text");
  meta.run_hash = read_str_attr(m, path, "/meta", "run_hash");
  meta.model_hash = read_str_attr(m, path, "/meta", "model_hash");
  return meta;
}

std::string read_plan(hid_t file, const std::string& path) {
  if (!has_link(file, path, "/plan")) bad_file(path, "has no dataset '/plan'");
  const std::string what = "cannot read dataset '/plan'";
  h5::Handle ds = h5::dataset(H5Dopen2(file, "/plan", H5P_DEFAULT), path, what);
  h5::Handle ftype = h5::type(H5Dget_type(ds.get()), path, what);
  h5::Handle sp = h5::space(H5Dget_space(ds.get()), path, what);
  if (H5Tget_class(ftype.get()) != H5T_STRING || H5Tis_variable_str(ftype.get()) <= 0 ||
      H5Sget_simple_extent_type(sp.get()) != H5S_SCALAR)
    bad_file(path, "dataset '/plan' is not a text (a scalar variable-length string)");
  h5::Handle mtype = h5::type(H5Tcopy(H5T_C_S1), path, what);
  if (H5Tset_size(mtype.get(), H5T_VARIABLE) < 0 || H5Tset_cset(mtype.get(), H5Tget_cset(ftype.get())) < 0)
    h5::fail(path, what);
  char* s = nullptr;
  if (H5Dread(ds.get(), mtype.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, &s) < 0) h5::fail(path, what);
  std::string out = s ? s : "";
  H5free_memory(s);
  return out;
}

// The optimizer's attributes, the data cursor and the plan.
void read_small_state(hid_t file, const std::string& path, Checkpoint& c) {
  {
    h5::Handle g = open_group(file, path, "/optimizer");
    c.optimizer_type = read_str_attr(g.get(), path, "/optimizer", "type");
    c.optimizer_steps = read_i64_attr(g.get(), path, "/optimizer", "step");
    const htri_t scaled = H5Aexists(g.get(), "loss_scale");  // fp16 runs only
    if (scaled < 0) h5::fail(path, "cannot read attribute 'loss_scale' of '/optimizer'");
    if (scaled > 0) {
      read_number_attr(g.get(), path, "/optimizer", "loss_scale", H5T_NATIVE_DOUBLE, &c.loss_scale);
      c.loss_scale_growth_tracker = read_i64_attr(g.get(), path, "/optimizer", "loss_scale_growth_tracker");
      if (!(c.loss_scale > 0) || !std::isfinite(c.loss_scale) || c.loss_scale_growth_tracker < 0)
        bad_file(path, "'/optimizer' has a loss scale of " + std::to_string(c.loss_scale) + " (growth tracker " +
                           std::to_string(c.loss_scale_growth_tracker) + "): not a positive finite number");
    }
  }
  {
    h5::Handle d = open_group(file, path, "/data");
    c.data.epoch = read_i64_attr(d.get(), path, "/data", "epoch");
    c.data.position = read_i64_attr(d.get(), path, "/data", "position");
    read_number_attr(d.get(), path, "/data", "seed", H5T_NATIVE_UINT64, &c.data.seed);
  }
  c.plan_text = read_plan(file, path);
}

// Optimizer state tensors and random streams.
// ---- tensors ----------------------------------------------------------------------------------------------

// One tensor to read, in the order the checkpoint lists them (params, buffers, optimizer state, streams).
struct Item {
  int group = 0;       // 0 /params, 1 /buffers, 2 /optimizer, 3 /rng
  std::string rel;     // relative to its group: "fc.weight", "fc.weight/exp_avg"
  std::string shown;   // "/params/fc.weight"
  TensorDesc desc;
  Tensor t;
  std::string stored;  // its checksum attribute ("" when not verifying)
  uint32_t crc = 0;
  size_t first_piece = 0, pieces = 0;  // its pieces when read directly
};

// A run of bytes of one tensor: file offset -> offset in the tensor's memory.
struct Piece {
  size_t item = 0;
  uint64_t file_offset = 0;
  size_t bytes = 0, mem_offset = 0;
  uint32_t crc = 0;
};

constexpr size_t kPieceBytes = size_t{8} << 20;  // contiguous datasets are cut into pieces of this size

// Appends the pieces of open dataset `ds` when it can be read straight from the file: unfiltered, in the
// little-endian file type of its dtype on a little-endian machine, and either contiguous or chunked as braid
// chunks ([1, ..., 1, k, whole axes...], so that every chunk is one run of the row-major tensor and an edge
// chunk's valid bytes are its prefix). False, with nothing appended, for any other layout.
bool plan_direct(hid_t ds, const Item& it, size_t item, std::optional<uint64_t> chunk_shift, uint64_t file_size,
                 std::vector<Piece>& out) {
  if constexpr (std::endian::native != std::endian::little) return false;
  const size_t bytes = it.desc.bytes();
  if (bytes == 0) return true;
  hid_t type = H5Dget_type(ds), dcpl = H5Dget_create_plist(ds), space = H5Dget_space(ds);
  struct Close {
    hid_t type, dcpl, space;
    ~Close() {
      if (type >= 0) H5Tclose(type);
      if (dcpl >= 0) H5Pclose(dcpl);
      if (space >= 0) H5Sclose(space);
    }
  } close{type, dcpl, space};
  if (type < 0 || dcpl < 0 || space < 0 || H5Tequal(type, h5::file_type(it.desc.dtype)) <= 0 || H5Pget_nfilters(dcpl) != 0)
    return false;
  const size_t start = out.size();
  auto fail = [&] {
    out.resize(start);
    return false;
  };
  H5D_layout_t layout = H5Pget_layout(dcpl);
  if (layout == H5D_CONTIGUOUS) {
    haddr_t addr = H5Dget_offset(ds);  // absolute
    if (addr == HADDR_UNDEF || H5Dget_storage_size(ds) != bytes || addr > file_size || bytes > file_size - addr) return fail();
    for (size_t off = 0; off < bytes; off += kPieceBytes)
      out.push_back(Piece{item, addr + off, std::min(kPieceBytes, bytes - off), off, 0});
    return true;
  }
  if (layout != H5D_CHUNKED || !chunk_shift) return false;
  const int rank = it.desc.shape.rank();
  std::vector<hsize_t> chunk(static_cast<size_t>(rank));
  if (rank < 1 || H5Pget_chunk(dcpl, rank, chunk.data()) != rank) return false;
  const auto& dims = it.desc.shape.dims();
  int p = 0;  // the axis the chunks split; axes before it have chunk 1, axes after it are whole
  while (p < rank - 1 && chunk[static_cast<size_t>(p)] == 1) ++p;
  size_t inner = dtype_size(it.desc.dtype), outer = 1;
  for (int a = p + 1; a < rank; ++a) {
    if (chunk[static_cast<size_t>(a)] != static_cast<hsize_t>(dims[static_cast<size_t>(a)])) return false;
    inner *= static_cast<size_t>(dims[static_cast<size_t>(a)]);
  }
  for (int a = 0; a < p; ++a) outer *= static_cast<size_t>(dims[static_cast<size_t>(a)]);
  const size_t along = static_cast<size_t>(dims[static_cast<size_t>(p)]), step = chunk[static_cast<size_t>(p)];
  std::vector<hsize_t> at(static_cast<size_t>(rank), 0);
  for (size_t o = 0; o < outer; ++o) {
    for (size_t rem = o, a = static_cast<size_t>(p); a-- > 0;) {  // the coordinates of the axes before p
      at[a] = rem % static_cast<size_t>(dims[a]);
      rem /= static_cast<size_t>(dims[a]);
    }
    for (size_t row = 0; row < along; row += step) {
      at[static_cast<size_t>(p)] = row;
      unsigned mask = 0;
      haddr_t addr = HADDR_UNDEF;
      hsize_t size = 0;
      if (H5Dget_chunk_info_by_coord(ds, at.data(), &mask, &addr, &size) < 0 || addr == HADDR_UNDEF || mask != 0)
        return fail();
      const size_t valid = std::min(step, along - row) * inner;
      const uint64_t file_offset = addr + *chunk_shift;
      if (size < valid || file_offset > file_size || valid > file_size - file_offset) return fail();
      out.push_back(Piece{item, file_offset, valid, (o * along + row) * inner, 0});
    }
  }
  return true;
}

// Allocates the directly read tensors and reads their pieces with pread, each piece checksummed, on a few
// threads; then joins each tensor's piece CRCs in memory order.
void read_pieces(const std::string& path, std::vector<Item>& items, std::vector<Piece>& pieces, bool verify) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) bad_file(path, std::string("cannot open: ") + std::strerror(errno));
  std::vector<size_t> direct;
  for (size_t i = 0; i < items.size(); ++i)
    if (!items[i].t.defined()) direct.push_back(i);  // read below
  std::mutex mu;
  std::string error;
  std::exception_ptr thrown;  // from a worker (out of memory): rethrown on the calling thread
  auto on_threads = [&](size_t n, const auto& fn) {
    const size_t threads = std::min<size_t>(std::clamp<size_t>(std::thread::hardware_concurrency(), 2, 8), n);
    std::atomic<size_t> next{0};
    auto work = [&] {
      try {
        for (size_t k; (k = next.fetch_add(1)) < n;) fn(k);
      } catch (...) {
        std::lock_guard<std::mutex> g(mu);
        if (!thrown) thrown = std::current_exception();
        next = n;
      }
    };
    std::vector<std::thread> pool;
    for (size_t k = 1; k < threads; ++k) pool.emplace_back(work);
    work();
    for (auto& t : pool) t.join();
    if (thrown) {
      ::close(fd);
      std::rethrow_exception(thrown);
    }
  };
  // Allocation on the threads too: the first touch of fresh memory costs as much as the copy.
  on_threads(direct.size(), [&](size_t k) { items[direct[k]].t = Tensor::empty(items[direct[k]].desc); });
  on_threads(pieces.size(), [&](size_t k) {
    Piece& pc = pieces[k];
    char* dst = static_cast<char*>(items[pc.item].t.raw()) + pc.mem_offset;
    for (size_t done = 0; done < pc.bytes;) {
      ssize_t r = ::pread(fd, dst + done, pc.bytes - done, static_cast<off_t>(pc.file_offset + done));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        std::lock_guard<std::mutex> g(mu);
        if (error.empty()) error = r == 0 ? "unexpected end of file" : std::strerror(errno);
        return;
      }
      done += static_cast<size_t>(r);
    }
    if (verify) pc.crc = crc32(0, dst, pc.bytes);
  });
  ::close(fd);
  if (!error.empty()) bad_file(path, "cannot read tensor data: " + error);
  for (Item& it : items) {
    if (it.pieces == 0 || !verify) continue;
    const Piece* pc = &pieces[it.first_piece];
    uint32_t crc = pc[0].crc;
    for (size_t k = 1; k < it.pieces; ++k)
      crc = static_cast<uint32_t>(crc32_combine(crc, pc[k].crc, static_cast<z_off_t>(pc[k].bytes)));
    it.crc = crc;
  }
}

// Every tensor of the groups asked for: located (and read through HDF5 where it cannot be read directly)
// under the HDF5 lock, then read directly without it, then checked.
std::vector<Item> read_items(h5::Handle file, std::unique_lock<std::recursive_mutex>& guard, const std::string& path,
                             bool verify, bool weights_only) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) bad_file(path, std::string("cannot stat: ") + std::strerror(errno));
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  std::optional<uint64_t> shift;
  {
    h5::Handle fcpl = h5::plist(H5Fget_create_plist(file.get()), path, "cannot read the file's properties");
    hsize_t userblock = 0;
    if (H5Pget_userblock(fcpl.get(), &userblock) < 0) h5::fail(path, "cannot read the file's properties");
    std::error_code ec;
    std::string tmp = std::filesystem::temp_directory_path(ec).string();
    std::optional<bool> relative = chunk_addresses_are_relative({tmp, std::filesystem::path(path).parent_path().string()});
    if (relative) shift = *relative ? userblock : 0;
  }
  std::vector<Item> items;
  std::vector<Piece> pieces;
  const char* groups[] = {"/params", "/buffers", "/optimizer", "/rng"};
  for (int gi = 0; gi < (weights_only ? 2 : 4); ++gi) {
    h5::Handle g = open_group(file.get(), path, groups[gi]);
    for (const std::string& rel : h5::dataset_names(g.get(), path, groups[gi])) {
      Item it;
      it.group = gi;
      it.rel = rel;
      it.shown = std::string(groups[gi]) + "/" + rel;
      h5::OpenDataset d = h5::open_dataset(g.get(), path, rel, it.shown);
      it.desc = d.desc;
      if (verify && !h5::read_string_attr(d.ds.get(), path, "checksum", &it.stored))
        throw UserError(SourceLoc{}, "tensor '" + it.shown + "' in " + path + " has no checksum attribute",
                        "files written by braid always have one; read with checksums off to load it anyway");
      it.first_piece = pieces.size();
      if (!plan_direct(d.ds.get(), it, items.size(), shift, file_size, pieces)) {
        it.t = h5::read_dataset(d, path, it.shown);
        if (verify) it.crc = crc32_of(it.t.raw(), it.t.bytes());
      }
      it.pieces = pieces.size() - it.first_piece;
      if (it.pieces == 0 && !it.t.defined()) it.t = Tensor::empty(it.desc);  // empty tensors
      items.push_back(std::move(it));
    }
  }
  if (!file.close()) h5::fail(path, "cannot close");
  guard.unlock();
  read_pieces(path, items, pieces, verify);
  guard.lock();
  for (const Item& it : items)
    if (verify && checksum_text(it.crc) != it.stored)
      throw UserError(SourceLoc{}, "tensor '" + it.shown + "' in " + path + " is corrupt (checksum mismatch: stored " +
                                       it.stored + ", data " + checksum_text(it.crc) + ")",
                      "the file was damaged after it was written; resume from an older checkpoint");
  return items;
}

// Fills `c`'s tensors, streams and optimizer state from the checked `items`.
void take_items(const std::string& path, const ReadOptions& o, std::vector<Item>& items, Checkpoint& c) {
  for (Item& it : items) {
    if (!o.allow_non_finite && it.group <= 2) {
      const NonFinite nf = find_non_finite(it.t);
      if (nf.count > 0)
        throw UserError(SourceLoc{}, "tensor '" + it.shown + "' in " + path + " holds " + describe(nf),
                        "its checksum is valid, so the run that saved it had diverged; resume from an older "
                        "checkpoint (braid inspect shows which tensors hold NaN/Inf)");
    }
    switch (it.group) {
      case 0: c.params.emplace_back(it.rel, it.t); break;
      case 1: c.buffers.emplace_back(it.rel, it.t); break;
      case 2: {
        size_t slash = it.rel.find('/');
        if (slash == std::string::npos || it.rel.find('/', slash + 1) != std::string::npos)
          bad_file(path, "dataset '" + it.shown + "' is not of the form /optimizer/<parameter>/<state>");
        c.optimizer.push_back(OptimizerEntry{it.rel.substr(0, slash), it.rel.substr(slash + 1), it.t});
        break;
      }
      default: {
        if (it.t.dtype() != DType::i64 || it.t.shape() != Shape{2})
          bad_file(path, "random stream '" + it.shown + "' is " + it.t.desc().str() + "; expected i64[2] (key, counter)");
        RngStream r;
        r.name = it.rel;
        std::memcpy(&r.key, it.t.data<int64_t>(), 8);
        std::memcpy(&r.counter, it.t.data<int64_t>() + 1, 8);
        c.rng.push_back(r);
      }
    }
  }
}

// The index of a verified format-2 file: read, checked against the header's CRC, decoded.
ckpt_index::Index read_index(const std::string& path, const ckpt_header::Header& h) {
  std::string bytes(static_cast<size_t>(h.index.size), '\0');
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) bad_file(path, std::string("cannot open: ") + std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t r = ::pread(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(h.index.offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    done += static_cast<size_t>(r);
  }
  const int err = errno;
  ::close(fd);
  if (done < bytes.size()) bad_file(path, std::string("cannot read its index: ") + (done ? std::strerror(err) : "end of file"));
  if (crc32(0, bytes.data(), bytes.size()) != h.index_crc)
    bad_file(path, "is corrupt: its index fails its checksum",
             "the file was damaged after it was written; resume from an older checkpoint");
  return ckpt_index::decode(bytes, path, h.size, h.userblock);
}

const char* const kGroupPaths[] = {"/params/", "/buffers/", "/optimizer/", "/rng/"};

// A format-2 checkpoint, through its index alone: no HDF5 call parses the file.
Checkpoint read_indexed(const std::string& path, const ckpt_header::Header& h, const ReadOptions& o) {
  ckpt_index::Index x = read_index(path, h);
  Checkpoint c;
  c.meta = std::move(x.meta);
  c.optimizer_type = std::move(x.optimizer_type);
  c.optimizer_steps = x.optimizer_steps;
  c.loss_scale = x.loss_scale;
  c.loss_scale_growth_tracker = x.loss_scale_growth_tracker;
  c.data = x.data;
  c.plan_text = std::move(x.plan_text);
  std::vector<Item> items;
  std::vector<Piece> pieces;
  for (ckpt_index::TensorEntry& e : x.tensors) {
    if (o.weights_only && e.group >= 2) continue;
    Item it;
    it.group = e.group;
    it.rel = std::move(e.rel);
    it.shown = kGroupPaths[e.group] + it.rel;
    it.desc = e.desc;
    it.stored = checksum_text(e.crc);
    it.first_piece = pieces.size();
    size_t mem = 0;
    for (const ckpt_index::FileRange& r : e.pieces) {
      // Pieces of at most kPieceBytes, so that large tensors are read on several threads.
      for (uint64_t off = 0; off < r.bytes; off += kPieceBytes) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(kPieceBytes, r.bytes - off));
        pieces.push_back(Piece{items.size(), r.offset + off, n, mem, 0});
        mem += n;
      }
    }
    it.pieces = pieces.size() - it.first_piece;
    if (it.pieces == 0) it.t = Tensor::empty(it.desc);  // empty tensors
    items.push_back(std::move(it));
  }
  read_pieces(path, items, pieces, true);
  for (const Item& it : items)
    if (checksum_text(it.crc) != it.stored)
      throw UserError(SourceLoc{}, "tensor '" + it.shown + "' in " + path + " is corrupt (checksum mismatch: stored " +
                                       it.stored + ", data " + checksum_text(it.crc) + ")",
                      "the file was damaged after it was written; resume from an older checkpoint");
  take_items(path, o, items, c);
  return c;
}

}  // namespace

Checkpoint read_checkpoint(const std::string& path, const ReadOptions& o) {
  auto guard = h5::lock();
  std::optional<ckpt_header::Header> header = precheck(path, o.verify_checksums);
  if (header && header->has_index) {
    guard.unlock();
    return read_indexed(path, *header, o);
  }
  // Format 1 (checked by its header first), or a file read without checks: through HDF5.
  h5::Handle file = h5::open_read_only(path);
  Checkpoint c;
  c.meta = read_meta(file.get(), path);
  read_small_state(file.get(), path, c);
  std::vector<Item> items = read_items(std::move(file), guard, path, o.verify_checksums, o.weights_only);
  take_items(path, o, items, c);
  return c;
}

CheckpointMeta read_checkpoint_meta(const std::string& path) {
  auto guard = h5::lock();
  std::optional<ckpt_header::Header> header = precheck(path, true);
  if (header->has_index) return read_index(path, *header).meta;
  h5::Handle file = h5::open_read_only(path);
  Checkpoint c;
  c.meta = read_meta(file.get(), path);
  read_small_state(file.get(), path, c);
  return c.meta;
}

}  // namespace braid::io
