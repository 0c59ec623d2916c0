// libFuzzer target for the live rendezvous store (src/distributed/store.h): one StoreServer in this process, on
// 127.0.0.1 only, with short deadlines; each input is a script of actions over up to 6 raw loopback
// connections: connect, hello with the right or a wrong token, valid requests, raw bytes, oversized length
// prefixes, half-closes (shutdown of the write side), resets, pauses (so the handshake and read deadlines and
// the eviction of the oldest unauthenticated connection fire) and reading replies. Checks, beyond
// ASan/UBSan on the server's code: every reply is a well-formed frame; a connection whose first frame is not
// the right hello never gets an ok; no unauthenticated connection ever held more than the first frame's
// limit; and after every input a well-behaved client still gets its value back. Bounded: at most 48 actions,
// 400 ms of pauses and a 10 ms wait per read, so an input costs well under a second.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "distributed/store.h"

using namespace braid::dist;
using namespace std::chrono_literals;

namespace {

constexpr const char* kToken = "fuzz-token-0123456789abcdef";
constexpr size_t kFirstFrameLimit = 4096;

struct Input {
  const uint8_t* p;
  size_t n;
  uint8_t byte() { return n ? (--n, *p++) : 0; }
  uint16_t u16() { return static_cast<uint16_t>(byte() | byte() << 8); }
  std::string str(size_t max) {
    const size_t len = std::min<size_t>(byte() % (max + 1), n);
    std::string s(reinterpret_cast<const char*>(p), len);
    p += len;
    n -= len;
    return s;
  }
};

StoreServer& server() {
  static StoreServer* s = [] {
    StoreServerOptions o;
    o.token = kToken;
    o.max_unauthenticated = 4;  // small, so that eviction happens
    o.max_connections = 16;
    o.max_unauthenticated_bytes = kFirstFrameLimit;
    o.max_message_bytes = 1 << 16;
    o.handshake_timeout = 150ms;
    o.read_timeout = 150ms;
    o.idle_timeout = 300ms;
    o.log = [](const std::string&) {};
    return new StoreServer(o);  // lives until exit: its I/O thread serves every input
  }();
  return *s;
}

StoreClient& good_client() {
  static StoreClient* c = [] {
    StoreClientOptions o;
    o.connect_timeout = 5s;
    o.op_timeout = 5s;
    return new StoreClient("127.0.0.1", server().port(), kToken, o);
  }();
  return *c;
}

struct Conn {
  int fd = -1;
  std::vector<uint8_t> in;  // reply bytes not yet parsed
  int first = 0;  // what this side sent first: 0 nothing yet, 1 the right hello, 2 another whole frame, 3 raw bytes
  bool first_checked = false;
  bool eof = false;
};

int connect_loopback() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(server().port()));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

void send_bytes(Conn& c, const void* data, size_t n) {
  if (c.fd < 0) return;
  // Non-blocking: a server that stops reading (a pending wait, a closed connection) never stalls the input.
  const ssize_t w = ::send(c.fd, data, n, MSG_NOSIGNAL | MSG_DONTWAIT);
  (void)w;
}

void send_frame(Conn& c, const std::vector<std::byte>& frame, bool right_hello) {
  if (c.first == 0) c.first = right_hello ? 1 : 2;
  send_bytes(c, frame.data(), frame.size());
}

// Reads what has arrived (waiting up to wait_ms) and checks every complete reply frame.
void drain(Conn& c, int wait_ms) {
  if (c.fd < 0 || c.eof) return;
  pollfd p{c.fd, POLLIN, 0};
  if (::poll(&p, 1, wait_ms) <= 0) return;
  uint8_t buf[8192];
  for (;;) {
    const ssize_t r = ::recv(c.fd, buf, sizeof buf, MSG_DONTWAIT);
    if (r <= 0) {
      if (r == 0 || (errno != EAGAIN && errno != EINTR)) c.eof = true;
      break;
    }
    c.in.insert(c.in.end(), buf, buf + r);
  }
  for (;;) {
    const std::span<const std::byte> rest(reinterpret_cast<const std::byte*>(c.in.data()), c.in.size());
    const FrameView f = next_frame(rest, 1 << 17);
    if (f.state == ParseState::NeedMore) break;
    if (f.state == ParseState::Invalid) std::abort();  // the server wrote a malformed frame
    StoreReply r;
    if (!parse_reply(f.body, r).empty()) std::abort();
    if (!c.first_checked) {
      c.first_checked = true;
      // A whole frame other than the right hello, sent first, is refused (or dropped), never answered ok.
      if (c.first == 2 && r.status == StoreStatus::Ok) std::abort();
    }
    c.in.erase(c.in.begin(), c.in.begin() + static_cast<long>(f.frame_bytes));
  }
}

StoreRequest request_from(Input& in) {
  StoreRequest q;
  switch (in.byte() % 8) {
    case 0: q.op = StoreOp::Set, q.key = in.str(16), q.value = in.str(64); break;
    case 1: q.op = StoreOp::Get, q.key = in.str(16); break;
    case 2: q.op = StoreOp::Wait, q.keys = {in.str(8), in.str(8)}, q.timeout_ms = in.byte(); break;
    case 3: q.op = StoreOp::Add, q.key = in.str(16), q.delta = static_cast<int8_t>(in.byte()); break;
    case 4: q.op = StoreOp::Barrier, q.key = in.str(8), q.n = in.byte() % 4, q.timeout_ms = in.byte(); break;
    case 5: q.op = StoreOp::Delete, q.key = in.str(16); break;
    case 6: q.op = StoreOp::Age, q.key = in.str(16); break;
    default: q.op = StoreOp::Time; break;
  }
  return q;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  StoreServer& srv = server();
  Input in{data, size};
  std::vector<Conn> conns;
  int paused_ms = 0;
  for (int step = 0; step < 48 && in.n > 0; ++step) {
    const uint8_t op = in.byte(), which = in.byte();  // an action: its op and the connection it acts on
    Conn* c = conns.empty() ? nullptr : &conns[which % conns.size()];
    switch (op % 12) {
      case 0:
      case 1:
        if (conns.size() < 6) {
          conns.emplace_back();
          conns.back().fd = connect_loopback();
        }
        break;
      case 2: {  // the right hello
        if (!c) break;
        StoreRequest q;
        q.op = StoreOp::Hello, q.version = kStoreVersion, q.token = kToken;
        send_frame(*c, encode_request(q), true);
        break;
      }
      case 3: {  // a wrong token, or a wrong version with the right one
        if (!c) break;
        StoreRequest q;
        q.op = StoreOp::Hello;
        q.version = in.byte() & 1 ? kStoreVersion : kStoreVersion + 1 + in.byte();
        q.token = q.version == kStoreVersion ? in.str(40) : std::string(kToken);
        if (q.version == kStoreVersion && q.token == kToken) q.token += "x";
        send_frame(*c, encode_request(q), false);
        break;
      }
      case 4:
      case 5:
        if (c) send_frame(*c, encode_request(request_from(in)), false);
        break;
      case 6: {  // raw bytes from the input
        if (!c) break;
        const std::string s = in.str(255);
        if (c->first == 0 && !s.empty()) c->first = 3;
        send_bytes(*c, s.data(), s.size());
        break;
      }
      case 7: {  // a length prefix (often beyond either limit), then up to 64 KiB of filler
        if (!c) break;
        const uint32_t len = static_cast<uint32_t>(in.u16()) << (in.byte() % 16);
        const uint8_t prefix[4] = {static_cast<uint8_t>(len), static_cast<uint8_t>(len >> 8),
                                   static_cast<uint8_t>(len >> 16), static_cast<uint8_t>(len >> 24)};
        if (c->first == 0) c->first = 3;
        send_bytes(*c, prefix, 4);
        const std::vector<uint8_t> filler(std::min<size_t>(len, 65536), in.byte());
        send_bytes(*c, filler.data(), filler.size());
        break;
      }
      case 8:  // half-open: this side stops writing, keeps reading
        if (c && c->fd >= 0) ::shutdown(c->fd, SHUT_WR);
        break;
      case 9:  // reset (or a plain close)
        if (c && c->fd >= 0) {
          if (in.byte() & 1) {
            linger l{1, 0};
            ::setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
          }
          ::close(c->fd);
          c->fd = -1;
        }
        break;
      case 10: {  // a pause: lets the deadlines and waits' timeouts fire
        const int ms = std::min(in.byte() % 200, 400 - paused_ms);
        if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
        paused_ms += std::max(ms, 0);
        break;
      }
      default:
        if (c) drain(*c, 10);
        break;
    }
  }
  for (auto& c : conns) {
    drain(c, 0);
    if (c.fd >= 0) ::close(c.fd);
  }
  if (srv.stats().unauthenticated_buffer_peak.load() > kFirstFrameLimit + kFrameHeaderBytes) std::abort();
  // The server still serves a well-behaved client (reconnecting if a pause outlived its idle timeout).
  static uint64_t round = 0;
  const std::string v = std::to_string(++round);
  for (int attempt = 0;; ++attempt) {
    try {
      good_client().set("fuzz/good-client-key", v);
      if (good_client().get("fuzz/good-client-key") != v) std::abort();
      break;
    } catch (const StoreError&) {
      if (attempt == 1) std::abort();  // one failure is a connection the idle timeout closed; two are a bug
    }
  }
  return 0;
}
