// The checkpoint index (see checkpoint_index.h): a writer and a decoder that trusts no byte.
#include "io/checkpoint_index.h"

#include <cmath>
#include <cstring>
#include <set>
#include <utility>

#include "core/error.h"

namespace braid::io::ckpt_index {

namespace {

constexpr char kMagic[] = "braid-index\n";
constexpr uint32_t kVersion = 1;
constexpr int kMaxRank = 16;

// The dtypes checkpoints store, by their code in the index.
constexpr DType kDTypes[] = {DType::f32, DType::f64, DType::i32, DType::i64};

int dtype_code(DType t) {
  for (int i = 0; i < 4; ++i)
    if (kDTypes[i] == t) return i;
  BRAID_ASSERT(false, "checkpoint index: dtype ", dtype_name(t), " is not stored");
  return -1;
}

class Writer {
 public:
  void u8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void u32(uint32_t v) { raw(&v, 4); }
  void u64(uint64_t v) { raw(&v, 8); }
  void i64(int64_t v) { raw(&v, 8); }
  void f64(double v) { raw(&v, 8); }
  void str(const std::string& s) {
    u64(s.size());
    out_ += s;
  }
  std::string take() { return std::move(out_); }

 private:
  void raw(const void* p, size_t n) {  // little-endian hosts only (checked where the file is written)
    out_.append(static_cast<const char*>(p), n);
  }
  std::string out_;
};

class Reader {
 public:
  Reader(const std::string& bytes, const std::string& path) : b_(bytes), path_(path) {}
  [[noreturn]] void bad(const std::string& what) const {
    throw UserError(SourceLoc{}, "checkpoint '" + path_ + "': its index is corrupt (" + what + " at byte " +
                                     std::to_string(at_) + " of " + std::to_string(b_.size()) + ")",
                    "the file was damaged or altered after it was written; resume from an older checkpoint");
  }
  size_t left() const { return b_.size() - at_; }
  void need(size_t n, const char* what) const {
    if (n > left()) bad(std::string("it ends inside ") + what);
  }
  uint8_t u8(const char* what) {
    need(1, what);
    return static_cast<uint8_t>(b_[at_++]);
  }
  template <class T>
  T pod(const char* what) {  // a little-endian scalar of T's size
    T v{};
    raw(&v, sizeof v, what);
    return v;
  }
  uint32_t u32(const char* what) { return pod<uint32_t>(what); }
  uint64_t u64(const char* what) { return pod<uint64_t>(what); }
  int64_t i64(const char* what) { return pod<int64_t>(what); }
  double f64(const char* what) { return pod<double>(what); }
  std::string str(const char* what) {
    uint64_t n = u64(what);
    if (n > left()) bad(std::string("a length of ") + std::to_string(n) + " bytes for " + what);
    std::string s = b_.substr(at_, static_cast<size_t>(n));
    at_ += static_cast<size_t>(n);
    return s;
  }
  // A count of records of at least `min_bytes` each: no more than what is left can hold.
  uint64_t count(size_t min_bytes, const char* what) {
    uint64_t n = u64(what);
    if (n > left() / min_bytes) bad(std::string("a count of ") + std::to_string(n) + " " + what);
    return n;
  }
  bool done() const { return at_ == b_.size(); }

 private:
  void raw(void* p, size_t n, const char* what) {
    need(n, what);
    std::memcpy(p, b_.data() + at_, n);
    at_ += n;
  }
  const std::string& b_;
  const std::string& path_;
  size_t at_ = 0;
};

// What the writer accepts as a name (checkpoint.cpp's check_name), and a stream or state name inside it.
bool valid_name(const std::string& s) { return !s.empty() && s != "." && s != ".." && s.find('/') == std::string::npos; }

bool valid_rel(int group, const std::string& rel) {
  if (group != 2) return valid_name(rel);
  size_t slash = rel.find('/');
  return slash != std::string::npos && valid_name(rel.substr(0, slash)) && valid_name(rel.substr(slash + 1));
}

}  // namespace

std::string encode(const Index& x) {
  Writer w;
  w.str(kMagic);
  w.u32(kVersion);
  const CheckpointMeta& m = x.meta;
  w.i64(m.format_version);
  w.str(m.braid_version);
  w.i64(m.step);
  w.i64(m.epoch);
  w.i64(m.samples_seen);
  w.f64(m.wall_time_s);
  for (const std::string* s : {&m.created, &m.run_path, &m.model_path, &m.run_text, &m.model_text, &m.run_hash,
                               &m.model_hash})
    w.str(*s);
  w.str(x.optimizer_type);
  w.i64(x.optimizer_steps);
  w.f64(x.loss_scale);
  w.i64(x.loss_scale_growth_tracker);
  w.i64(x.data.epoch);
  w.i64(x.data.position);
  w.u64(x.data.seed);
  w.str(x.plan_text);
  w.u64(x.tensors.size());
  for (const TensorEntry& t : x.tensors) {
    w.u8(static_cast<uint8_t>(t.group));
    w.str(t.rel);
    w.u8(static_cast<uint8_t>(dtype_code(t.desc.dtype)));
    w.u8(static_cast<uint8_t>(t.desc.shape.rank()));
    for (int64_t d : t.desc.shape.dims()) w.i64(d);
    w.u32(t.crc);
    w.u64(t.pieces.size());
    for (const FileRange& r : t.pieces) {
      w.u64(r.offset);
      w.u64(r.bytes);
    }
  }
  return w.take();
}

Index decode(const std::string& bytes, const std::string& path, uint64_t file_size, uint64_t data_start) {
  Reader r(bytes, path);
  if (data_start > file_size) r.bad("a file shorter than its header");
  if (r.str("the magic") != kMagic) r.bad("no braid-index magic");
  const uint32_t version = r.u32("the version");
  if (version != kVersion) r.bad("index version " + std::to_string(version) + ", this braid reads version 1");
  Index x;
  CheckpointMeta& m = x.meta;
  const int64_t format = r.i64("the format version");
  if (format < 2 || format > kCheckpointFormat) r.bad("format version " + std::to_string(format));
  m.format_version = static_cast<int>(format);
  m.braid_version = r.str("the braid version");
  m.step = r.i64("the step");
  m.epoch = r.i64("the epoch");
  m.samples_seen = r.i64("the sample count");
  m.wall_time_s = r.f64("the wall time");
  if (m.step < 0 || m.epoch < 0 || m.samples_seen < 0 || !std::isfinite(m.wall_time_s) || m.wall_time_s < 0)
    r.bad("a negative step, epoch, sample count or time");
  for (std::string* s : {&m.created, &m.run_path, &m.model_path, &m.run_text, &m.model_text, &m.run_hash,
                         &m.model_hash})
    *s = r.str("the meta");
  x.optimizer_type = r.str("the optimizer type");
  x.optimizer_steps = r.i64("the optimizer step");
  x.loss_scale = r.f64("the loss scale");
  x.loss_scale_growth_tracker = r.i64("the loss scale's growth tracker");
  if (x.optimizer_steps < 0) r.bad("a negative optimizer step");
  if (x.loss_scale != 0 && (!(x.loss_scale > 0) || !std::isfinite(x.loss_scale) || x.loss_scale_growth_tracker < 0))
    r.bad("a loss scale that is not a positive finite number");
  x.data.epoch = r.i64("the data cursor");
  x.data.position = r.i64("the data cursor");
  x.data.seed = r.u64("the data cursor");
  if (x.data.epoch < 0 || x.data.position < 0) r.bad("a negative data cursor");
  x.plan_text = r.str("the plan");
  // A tensor takes at least 1 + 8 + 1 + 1 + 4 + 8 bytes.
  const uint64_t n = r.count(23, "tensors");
  x.tensors.reserve(static_cast<size_t>(n));
  std::set<std::pair<int, std::string>> seen;
  int last_group = 0;
  uint64_t all_bytes = 0;  // of every tensor: at most the file's data, which bounds what a reader allocates
  for (uint64_t i = 0; i < n; ++i) {
    TensorEntry t;
    t.group = r.u8("a tensor's group");
    if (t.group > 3 || t.group < last_group) r.bad("a tensor group " + std::to_string(t.group) + " out of order");
    last_group = t.group;
    t.rel = r.str("a tensor's name");
    if (!valid_rel(t.group, t.rel)) r.bad("a tensor name that cannot be stored");
    if (!seen.emplace(t.group, t.rel).second) r.bad("tensor '" + t.rel + "' listed twice");
    const uint8_t code = r.u8("a tensor's dtype");
    if (code >= 4) r.bad("dtype code " + std::to_string(code));
    t.desc.dtype = kDTypes[code];
    const int rank = r.u8("a tensor's rank");
    if (rank > kMaxRank) r.bad("rank " + std::to_string(rank));
    std::vector<int64_t> dims(static_cast<size_t>(rank));
    for (int64_t& d : dims) d = r.i64("a tensor's shape");
    t.desc.shape = Shape(std::move(dims));
    const std::optional<int64_t> nbytes = t.desc.checked_bytes();
    if (!nbytes || static_cast<uint64_t>(*nbytes) > file_size - data_start - all_bytes)
      r.bad("tensor '" + t.rel + "' of shape " + t.desc.shape.str() + ": the tensors hold more bytes than the file");
    all_bytes += static_cast<uint64_t>(*nbytes);
    t.crc = r.u32("a tensor's checksum");
    const uint64_t pieces = r.count(16, "pieces");
    t.pieces.resize(static_cast<size_t>(pieces));
    uint64_t total = 0;
    for (FileRange& p : t.pieces) {
      p.offset = r.u64("a piece");
      p.bytes = r.u64("a piece");
      if (p.offset < data_start || p.bytes > file_size || p.offset > file_size - p.bytes || p.bytes == 0)
        r.bad("a piece of tensor '" + t.rel + "' outside the file's data");
      total += p.bytes;  // no overflow: each piece is at most the file's size and there are few
      if (total > static_cast<uint64_t>(*nbytes)) break;
    }
    if (total != static_cast<uint64_t>(*nbytes))
      r.bad("tensor '" + t.rel + "' whose pieces hold " + std::to_string(total) + " of its " +
            std::to_string(*nbytes) + " bytes");
    x.tensors.push_back(std::move(t));
  }
  if (!r.done()) r.bad("bytes after its end");
  return x;
}

}  // namespace braid::io::ckpt_index
