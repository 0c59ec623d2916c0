// The store's frames (see store_protocol.h). A Reader walks a body with bounds checks on every field; the
// first short read makes it fail and every later read return zeros, so parse code needs one check at the end.
#include "distributed/store_protocol.h"

#include <cstring>

#include "core/error.h"

namespace braid::dist {

std::string_view store_op_name(StoreOp op) {
  switch (op) {
    case StoreOp::Hello: return "hello";
    case StoreOp::Set: return "set";
    case StoreOp::Get: return "get";
    case StoreOp::Wait: return "wait";
    case StoreOp::Add: return "add";
    case StoreOp::Barrier: return "barrier";
    case StoreOp::Delete: return "delete";
    case StoreOp::Age: return "age";
    case StoreOp::Time: return "time";
  }
  return "?";
}

namespace {

class Reader {
 public:
  explicit Reader(std::span<const std::byte> b) : b_(b) {}
  bool ok() const { return ok_; }
  bool at_end() const { return pos_ == b_.size(); }
  size_t left() const { return b_.size() - pos_; }

  uint64_t uint(int bytes) {
    if (!ok_ || left() < static_cast<size_t>(bytes)) return fail();
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(b_[pos_ + static_cast<size_t>(i)]) << (8 * i);
    pos_ += static_cast<size_t>(bytes);
    return v;
  }
  std::string str() {
    const uint64_t n = uint(4);
    if (!ok_ || left() < n) {
      fail();
      return {};
    }
    std::string s(reinterpret_cast<const char*>(b_.data() + pos_), n);
    pos_ += n;
    return s;
  }

 private:
  uint64_t fail() {
    ok_ = false;
    return 0;
  }
  std::span<const std::byte> b_;
  size_t pos_ = 0;
  bool ok_ = true;
};

class Writer {
 public:
  Writer() { out_.resize(kFrameHeaderBytes); }
  void uint(uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out_.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xff));
  }
  void str(std::string_view s) {
    uint(s.size(), 4);
    const auto* p = reinterpret_cast<const std::byte*>(s.data());
    out_.insert(out_.end(), p, p + s.size());
  }
  std::vector<std::byte> finish() {
    const uint64_t body = out_.size() - kFrameHeaderBytes;
    BRAID_ASSERT(body <= 0xffffffffULL, "a store frame of ", body, " bytes does not fit a u32 length");
    for (size_t i = 0; i < kFrameHeaderBytes; ++i) out_[i] = static_cast<std::byte>((body >> (8 * i)) & 0xff);
    return std::move(out_);
  }

 private:
  std::vector<std::byte> out_;
};

}  // namespace

FrameView next_frame(std::span<const std::byte> buf, size_t max_body) {
  FrameView v;
  if (buf.size() < kFrameHeaderBytes) return v;
  uint64_t len = 0;
  for (size_t i = 0; i < kFrameHeaderBytes; ++i) len |= static_cast<uint64_t>(buf[i]) << (8 * i);
  if (len == 0) {
    v.state = ParseState::Invalid;
    v.error = "empty frame";
    return v;
  }
  if (len > max_body) {
    v.state = ParseState::Invalid;
    v.error = BRAID_STR("frame of ", len, " bytes exceeds the limit of ", max_body, " bytes");
    return v;
  }
  if (buf.size() - kFrameHeaderBytes < len) return v;
  v.state = ParseState::Frame;
  v.frame_bytes = kFrameHeaderBytes + len;
  v.body = buf.subspan(kFrameHeaderBytes, len);
  return v;
}

std::string parse_request(std::span<const std::byte> body, StoreRequest& out) {
  Reader r(body);
  const uint64_t op = r.uint(1);
  if (!r.ok()) return "empty request";
  out = StoreRequest{};
  switch (op) {
    case static_cast<uint64_t>(StoreOp::Hello):
      out.version = static_cast<uint32_t>(r.uint(4));
      out.token = r.str();
      break;
    case static_cast<uint64_t>(StoreOp::Set):
      out.key = r.str();
      out.value = r.str();
      break;
    case static_cast<uint64_t>(StoreOp::Get):
    case static_cast<uint64_t>(StoreOp::Delete):
    case static_cast<uint64_t>(StoreOp::Age):
      out.key = r.str();
      break;
    case static_cast<uint64_t>(StoreOp::Wait): {
      const uint64_t count = r.uint(4);
      if (count > kMaxKeysPerWait) return BRAID_STR("wait for ", count, " keys (at most ", kMaxKeysPerWait, ")");
      // Each key needs at least its 4-byte length: reject impossible counts before reserving for them.
      if (count * 4 > r.left()) return BRAID_STR("wait for ", count, " keys in ", r.left(), " bytes");
      out.keys.reserve(count);
      for (uint64_t i = 0; i < count && r.ok(); ++i) out.keys.push_back(r.str());
      out.timeout_ms = r.uint(8);
      break;
    }
    case static_cast<uint64_t>(StoreOp::Add):
      out.key = r.str();
      out.delta = static_cast<int64_t>(r.uint(8));
      break;
    case static_cast<uint64_t>(StoreOp::Barrier):
      out.key = r.str();
      out.n = static_cast<uint32_t>(r.uint(4));
      out.timeout_ms = r.uint(8);
      break;
    case static_cast<uint64_t>(StoreOp::Time): break;
    default: return BRAID_STR("unknown opcode ", op);
  }
  out.op = static_cast<StoreOp>(op);
  if (!r.ok()) return BRAID_STR(store_op_name(out.op), " request is truncated");
  if (!r.at_end()) return BRAID_STR(store_op_name(out.op), " request has ", r.left(), " trailing bytes");
  return {};
}

std::string parse_reply(std::span<const std::byte> body, StoreReply& out) {
  Reader r(body);
  const uint64_t st = r.uint(1);
  if (!r.ok()) return "empty reply";
  if (st > static_cast<uint64_t>(StoreStatus::Error)) return BRAID_STR("unknown reply status ", st);
  out.status = static_cast<StoreStatus>(st);
  out.payload = r.str();
  if (!r.ok()) return "reply is truncated";
  if (!r.at_end()) return BRAID_STR("reply has ", r.left(), " trailing bytes");
  return {};
}

std::vector<std::byte> encode_request(const StoreRequest& q) {
  Writer w;
  w.uint(static_cast<uint8_t>(q.op), 1);
  switch (q.op) {
    case StoreOp::Hello:
      w.uint(q.version, 4);
      w.str(q.token);
      break;
    case StoreOp::Set:
      w.str(q.key);
      w.str(q.value);
      break;
    case StoreOp::Get:
    case StoreOp::Delete:
    case StoreOp::Age: w.str(q.key); break;
    case StoreOp::Wait:
      w.uint(q.keys.size(), 4);
      for (const auto& k : q.keys) w.str(k);
      w.uint(q.timeout_ms, 8);
      break;
    case StoreOp::Add:
      w.str(q.key);
      w.uint(static_cast<uint64_t>(q.delta), 8);
      break;
    case StoreOp::Barrier:
      w.str(q.key);
      w.uint(q.n, 4);
      w.uint(q.timeout_ms, 8);
      break;
    case StoreOp::Time: break;
  }
  return w.finish();
}

std::vector<std::byte> encode_reply(const StoreReply& r) {
  Writer w;
  w.uint(static_cast<uint8_t>(r.status), 1);
  w.str(r.payload);
  return w.finish();
}

std::string encode_i64(int64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<size_t>(i)] = static_cast<char>((static_cast<uint64_t>(v) >> (8 * i)) & 0xff);
  return s;
}

int64_t decode_i64(std::string_view s) {
  if (s.size() != 8) return 0;
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(s[static_cast<size_t>(i)])) << (8 * i);
  return static_cast<int64_t>(v);
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  // Walks the longer string whole; a length mismatch is folded into the same accumulator.
  const size_t n = a.size() > b.size() ? a.size() : b.size();
  volatile unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff = static_cast<unsigned char>(diff | (x ^ y));
  }
  return diff == 0;
}

}  // namespace braid::dist
