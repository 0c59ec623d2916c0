// The rendezvous store (see store.h). The server runs every connection, the key-value map and the waiters on
// one Asio I/O thread, so none of that state needs a lock. A sweep timer (every 50 ms) enforces the
// handshake, read, write and idle deadlines and the waits' timeouts; parsing is store_protocol's pure
// next_frame / parse_request over each connection's input buffer.
// Every socket here is close-on-exec from its creation: Asio 1.74 opens and accepts without SOCK_CLOEXEC, so
// sockets are made with socket(SOCK_CLOEXEC) / accept4(SOCK_CLOEXEC) and handed to Asio; a rank that the
// launcher forks and execs inherits none of the store's (a later fcntl would race with that fork).
#include "distributed/store.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <utility>  // before Asio: its awaitable.hpp uses std::exchange without including it

#include <boost/asio.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <list>
#include <map>
#include <thread>
#include <unordered_map>

#include "core/error.h"

namespace braid::dist {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

LogSink stderr_log(std::string prefix) {
  return [prefix = std::move(prefix)](const std::string& line) {
    std::fprintf(stderr, "%s: %s\n", prefix.c_str(), line.c_str());
  };
}

namespace {

double secs(milliseconds d) { return static_cast<double>(d.count()) / 1000.0; }

boost::system::error_code errno_code() { return {errno, boost::system::system_category()}; }

// Gives `s` a new socket of `protocol`, close-on-exec from the start.
template <typename Socket>
void open_cloexec(Socket& s, const tcp& protocol, boost::system::error_code& ec) {
  const int fd = ::socket(protocol.family(), SOCK_STREAM | SOCK_CLOEXEC, IPPROTO_TCP);
  if (fd < 0) {
    ec = errno_code();
    return;
  }
  s.assign(protocol, fd, ec);
  if (ec) ::close(fd);
}

std::string join_keys(const std::vector<std::string>& keys) {
  std::string s;
  for (const auto& k : keys) s += (s.empty() ? "" : ", ") + k;
  return s;
}

}  // namespace

// ---------------------------------------------------------------- server

struct StoreServer::Impl {
  struct Conn {
    explicit Conn(tcp::socket s) : sock(std::move(s)) {}
    tcp::socket sock;
    uint64_t id = 0;
    std::string peer;
    std::vector<std::byte> in;       // received, not yet parsed
    std::vector<std::byte> chunk;    // read buffer: the first frame's limit before the hello, 64 KiB after
    bool authed = false, busy = false, reading = false, closed = false;
    Clock::time_point accepted, frame_start, last_activity, write_start;
    std::deque<std::vector<std::byte>> outq;
    bool writing = false;
    std::list<uint64_t>::iterator unauth_pos;  // in unauth order while !authed
  };
  using ConnPtr = std::shared_ptr<Conn>;

  struct Waiter {
    ConnPtr conn;
    std::vector<std::string> keys;  // Wait
    std::string barrier;            // Barrier name ("" for a Wait)
    Clock::time_point deadline;
  };

  struct Entry {
    std::string value;
    Clock::time_point written;
  };

  struct BarrierState {
    uint32_t n = 0;
    std::vector<uint64_t> waiters;  // ids into waiters_
  };

  StoreServerOptions opt;
  StoreServerStats stats;
  asio::io_context io;
  tcp::acceptor acceptor{io};
  tcp protocol = tcp::v4();
  asio::steady_timer sweep{io};
  asio::steady_timer accept_retry{io};
  std::thread thread;

  uint64_t next_id = 1;
  std::unordered_map<uint64_t, ConnPtr> conns;
  std::list<uint64_t> unauth;  // unauthenticated connections, oldest first
  int authed_count = 0;
  std::unordered_map<std::string, Entry> kv;
  std::map<uint64_t, Waiter> waiters;
  std::map<std::string, BarrierState> barriers;
  uint64_t next_waiter = 1;

  void log(const std::string& s) { opt.log(s); }

  void start() {
    boost::system::error_code ec;
    const auto addr = asio::ip::make_address(opt.host, ec);
    if (ec) throw StoreError(BRAID_STR("store: '", opt.host, "' is not an IP address: ", ec.message()));
    const tcp::endpoint ep(addr, static_cast<unsigned short>(opt.port));
    protocol = ep.protocol();
    open_cloexec(acceptor, protocol, ec);
    if (!ec) acceptor.non_blocking(true, ec);  // do_accept drains it with accept4 until EAGAIN
    if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor.bind(ep, ec);
    if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) throw StoreError(BRAID_STR("store: cannot listen on ", opt.host, ":", opt.port, ": ", ec.message()));
    do_accept();
    arm_sweep();
    thread = std::thread([this] {
      for (;;) {  // a handler that throws (out of memory for a huge value) costs its request, not the server
        try {
          io.run();
          return;
        } catch (const std::exception& e) {
          log(BRAID_STR("internal error while serving: ", e.what()));
        }
      }
    });
  }

  void stop() {
    asio::post(io, [this] {
      boost::system::error_code ec;
      acceptor.close(ec);
      sweep.cancel();
      accept_retry.cancel();
      for (auto& [id, c] : conns) c->sock.close(ec);
      conns.clear();
      waiters.clear();
      io.stop();
    });
    if (thread.joinable()) thread.join();
  }

  // Waits for the listening socket to be readable, then accepts with accept4(SOCK_CLOEXEC) (Asio's accept
  // cannot) until no connection is pending.
  void do_accept() {
    acceptor.async_wait(tcp::acceptor::wait_read, [this](boost::system::error_code ec) {
      if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
      while (!ec) {
        const int fd = ::accept4(acceptor.native_handle(), nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) {
          if (errno == EAGAIN || errno == EWOULDBLOCK) return do_accept();
          if (errno == EINTR || errno == ECONNABORTED) continue;
          ec = errno_code();
          break;
        }
        tcp::socket s(io);
        s.assign(protocol, fd, ec);
        if (ec) {
          ::close(fd);
          break;
        }
        on_accept(std::move(s));
      }
      // Out of descriptors (or another accept error): say so, and retry after a pause instead of spinning.
      log(BRAID_STR("accept failed: ", ec.message()));
      accept_retry.expires_after(milliseconds(100));
      accept_retry.async_wait([this](boost::system::error_code e) {
        if (!e) do_accept();
      });
    });
  }

  void on_accept(tcp::socket s) {
    boost::system::error_code ec;
    auto c = std::make_shared<Conn>(std::move(s));
    const auto ep = c->sock.remote_endpoint(ec);
    c->peer = ec ? std::string("?") : BRAID_STR(ep.address().to_string(), ":", ep.port());
    c->id = next_id++;
    c->accepted = c->last_activity = Clock::now();
    c->sock.set_option(tcp::no_delay(true), ec);
    c->chunk.resize(opt.max_unauthenticated_bytes + kFrameHeaderBytes);
    ++stats.accepted;
    if (static_cast<int>(unauth.size()) >= opt.max_unauthenticated) {
      // Drop the oldest unauthenticated connection: a flood of idle sockets cannot lock out a real client.
      const uint64_t oldest = unauth.front();
      auto it = conns.find(oldest);
      ++stats.evicted;
      if (it != conns.end()) {
        log(BRAID_STR("dropping unauthenticated connection from ", it->second->peer, ": ",
                      opt.max_unauthenticated, " connections are waiting for a handshake (limit)"));
        close(it->second);
      }
    }
    conns[c->id] = c;
    unauth.push_back(c->id);
    c->unauth_pos = std::prev(unauth.end());
    read_more(c);
  }

  void close(ConnPtr c) {  // by value: erasing it from conns must not free it mid-call
    if (c->closed) return;
    c->closed = true;
    boost::system::error_code ec;
    c->sock.close(ec);
    if (!c->authed) unauth.erase(c->unauth_pos);
    else --authed_count;
    for (auto it = waiters.begin(); it != waiters.end();) {
      if (it->second.conn == c) {
        drop_from_barrier(it->first, it->second.barrier);
        it = waiters.erase(it);
      } else {
        ++it;
      }
    }
    conns.erase(c->id);
  }

  void read_more(const ConnPtr& c) {
    if (c->closed || c->reading || c->busy) return;
    // Before the hello: never more than its frame's limit in memory (a longer frame is refused on its prefix).
    size_t want = c->chunk.size();
    if (!c->authed) {
      const size_t cap = opt.max_unauthenticated_bytes + kFrameHeaderBytes;
      want = c->in.size() < cap ? std::min(want, cap - c->in.size()) : 0;
      if (want == 0) return reject(c, "no hello in the first frame");  // next_frame refuses such a frame first
    }
    c->reading = true;
    c->sock.async_read_some(asio::buffer(c->chunk.data(), want), [this, c](boost::system::error_code ec, size_t n) {
      c->reading = false;
      if (c->closed) return;
      if (ec) {
        if (!c->authed && ec == asio::error::eof)
          log(BRAID_STR("connection from ", c->peer, " closed before its handshake"));
        close(c);
        return;
      }
      if (c->in.empty()) c->frame_start = Clock::now();
      c->last_activity = Clock::now();
      c->in.insert(c->in.end(), c->chunk.begin(), c->chunk.begin() + static_cast<long>(n));
      if (!c->authed && c->in.size() > stats.unauthenticated_buffer_peak)
        stats.unauthenticated_buffer_peak = c->in.size();
      process(c);
      read_more(c);
    });
  }

  // Handles every complete frame at the front of c->in, stopping while a wait or barrier is pending.
  void process(const ConnPtr& c) {
    size_t used = 0;
    while (!c->closed && !c->busy) {
      const std::span<const std::byte> rest(c->in.data() + used, c->in.size() - used);
      const FrameView f = next_frame(rest, c->authed ? opt.max_message_bytes : opt.max_unauthenticated_bytes);
      if (f.state == ParseState::NeedMore) break;
      if (f.state == ParseState::Invalid) {
        if (f.error.find("exceeds") != std::string::npos) ++stats.too_large;
        else ++stats.bad_frame;
        reject(c, c->authed ? f.error : BRAID_STR(f.error, " before the handshake"));
        return;
      }
      StoreRequest q;
      if (auto e = parse_request(f.body, q); !e.empty()) {
        ++stats.bad_frame;
        reject(c, e);
        return;
      }
      used += f.frame_bytes;
      handle(c, q);
    }
    if (c->closed) return;
    c->in.erase(c->in.begin(), c->in.begin() + static_cast<long>(used));
    if (used && !c->in.empty()) c->frame_start = Clock::now();
  }

  void reject(const ConnPtr& c, const std::string& why) {
    log(BRAID_STR("closing connection from ", c->peer, ": ", why));
    reply_and_close(c, StoreReply{StoreStatus::Error, why});
  }

  void reply_and_close(const ConnPtr& c, const StoreReply& r) {
    // Best effort, bounded: a short reply into the socket buffer, then close.
    const auto bytes = encode_reply(r);
    boost::system::error_code ec;
    c->sock.non_blocking(true, ec);
    c->sock.write_some(asio::buffer(bytes), ec);
    close(c);
  }

  void send(const ConnPtr& c, const StoreReply& r) {
    if (c->closed) return;
    c->outq.push_back(encode_reply(r));
    flush(c);
  }

  void flush(const ConnPtr& c) {
    if (c->writing || c->outq.empty() || c->closed) return;
    c->writing = true;
    c->write_start = Clock::now();
    asio::async_write(c->sock, asio::buffer(c->outq.front()), [this, c](boost::system::error_code ec, size_t) {
      c->writing = false;
      if (c->closed) return;
      if (ec) {
        close(c);
        return;
      }
      c->outq.pop_front();
      flush(c);
    });
  }

  void handle(const ConnPtr& c, const StoreRequest& q) {
    ++stats.requests;
    if (!c->authed) {
      if (q.op != StoreOp::Hello) {
        ++stats.bad_token;
        return reject(c, BRAID_STR("first request is '", store_op_name(q.op), "', not a hello with the job token"));
      }
      if (q.version != kStoreVersion) {
        ++stats.bad_frame;
        return reject(c, BRAID_STR("protocol version ", q.version, " (this server speaks ", kStoreVersion, ")"));
      }
      if (!constant_time_equal(q.token, opt.token)) {
        ++stats.bad_token;
        return reject(c, "wrong job token");  // the token itself is never logged
      }
      if (authed_count >= opt.max_connections) {
        ++stats.refused_full;
        return reject(c, BRAID_STR(authed_count, " connections are open (limit ", opt.max_connections, ")"));
      }
      unauth.erase(c->unauth_pos);
      c->authed = true;
      c->chunk.resize(65536);  // no read is in flight: handle() runs from a completed read or a posted resume
      ++authed_count;
      ++stats.authenticated;
      return send(c, {});
    }
    const auto now = Clock::now();
    switch (q.op) {
      case StoreOp::Hello: return send(c, {StoreStatus::Error, "hello sent twice"});
      case StoreOp::Set:
        kv[q.key] = Entry{q.value, now};
        send(c, {});
        return wake();
      case StoreOp::Get: {
        auto it = kv.find(q.key);
        if (it == kv.end()) return send(c, {StoreStatus::NotFound, ""});
        return send(c, {StoreStatus::Ok, it->second.value});
      }
      case StoreOp::Age: {
        auto it = kv.find(q.key);
        if (it == kv.end()) return send(c, {StoreStatus::NotFound, ""});
        const auto ms = std::chrono::duration_cast<milliseconds>(now - it->second.written).count();
        return send(c, {StoreStatus::Ok, encode_i64(ms)});
      }
      case StoreOp::Add: {
        Entry& e = kv[q.key];
        const int64_t v = static_cast<int64_t>(static_cast<uint64_t>(decode_i64(e.value)) +
                                               static_cast<uint64_t>(q.delta));
        e.value = encode_i64(v);
        e.written = now;
        send(c, {StoreStatus::Ok, e.value});
        return wake();
      }
      case StoreOp::Time:
        return send(c, {StoreStatus::Ok,
                        encode_i64(std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count())});
      case StoreOp::Delete: {
        const bool had = kv.erase(q.key) > 0;
        return send(c, {StoreStatus::Ok, std::string(1, had ? '\1' : '\0')});
      }
      case StoreOp::Wait: {
        if (all_present(q.keys)) return send(c, {});
        c->busy = true;
        waiters[next_waiter++] = Waiter{c, q.keys, "", now + milliseconds(q.timeout_ms)};
        return;
      }
      case StoreOp::Barrier: {
        if (q.n == 0) return send(c, {StoreStatus::Error, "barrier of 0 participants"});
        BarrierState& b = barriers[q.key];
        if (b.waiters.empty()) b.n = q.n;
        if (b.n != q.n)
          return send(c, {StoreStatus::Error,
                          BRAID_STR("barrier '", q.key, "' is for ", b.n, " participants, this caller says ", q.n)});
        const uint64_t id = next_waiter++;
        waiters[id] = Waiter{c, {}, q.key, now + milliseconds(q.timeout_ms)};
        c->busy = true;
        b.waiters.push_back(id);
        if (b.waiters.size() == b.n) {
          for (uint64_t w : b.waiters) finish_waiter(w, {});
          barriers.erase(q.key);
        }
        return;
      }
    }
  }

  bool all_present(const std::vector<std::string>& keys) const {
    for (const auto& k : keys)
      if (!kv.count(k)) return false;
    return true;
  }

  void wake() {
    std::vector<uint64_t> done;
    for (auto& [id, w] : waiters)
      if (w.barrier.empty() && all_present(w.keys)) done.push_back(id);
    for (uint64_t id : done) finish_waiter(id, {});
  }

  void finish_waiter(uint64_t id, const StoreReply& r) {
    auto it = waiters.find(id);
    if (it == waiters.end()) return;
    ConnPtr c = it->second.conn;
    waiters.erase(it);
    c->busy = false;
    send(c, r);
    // Resume the connection from a fresh handler: this may run inside process() of the same connection.
    asio::post(io, [this, c] {
      if (c->closed || c->busy) return;
      if (!c->in.empty()) {
        c->frame_start = Clock::now();
        process(c);
      }
      read_more(c);
    });
  }

  void drop_from_barrier(uint64_t id, const std::string& name) {
    if (name.empty()) return;
    auto b = barriers.find(name);
    if (b == barriers.end()) return;
    auto& ws = b->second.waiters;
    ws.erase(std::remove(ws.begin(), ws.end(), id), ws.end());
    if (ws.empty()) barriers.erase(b);
  }

  void arm_sweep() {
    sweep.expires_after(milliseconds(50));
    sweep.async_wait([this](boost::system::error_code ec) {
      if (ec) return;
      on_sweep();
      arm_sweep();
    });
  }

  void on_sweep() {
    const auto now = Clock::now();
    std::vector<std::pair<ConnPtr, std::string>> expired;
    for (auto& [id, c] : conns) {
      if (!c->authed && now - c->accepted > opt.handshake_timeout)
        expired.emplace_back(c, BRAID_STR("no handshake within ", secs(opt.handshake_timeout), " s"));
      else if (!c->busy && !c->in.empty() && now - c->frame_start > opt.read_timeout)
        expired.emplace_back(c, BRAID_STR("a frame took longer than ", secs(opt.read_timeout), " s to arrive (",
                                          c->in.size(), " bytes so far)"));
      else if (c->writing && now - c->write_start > opt.read_timeout)
        expired.emplace_back(c, BRAID_STR("a reply could not be written within ", secs(opt.read_timeout), " s"));
      else if (c->authed && opt.idle_timeout.count() > 0 && !c->busy && c->in.empty() && !c->writing &&
               now - c->last_activity > opt.idle_timeout)
        expired.emplace_back(c, BRAID_STR("idle for ", secs(opt.idle_timeout), " s"));
    }
    for (auto& [c, why] : expired) {
      ++stats.timed_out;
      log(BRAID_STR("closing connection from ", c->peer, ": ", why));
      close(c);
    }
    std::vector<std::pair<uint64_t, StoreReply>> late;
    for (auto& [id, w] : waiters) {
      if (now < w.deadline) continue;
      if (w.barrier.empty()) {
        std::vector<std::string> missing;
        for (const auto& k : w.keys)
          if (!kv.count(k)) missing.push_back(k);
        late.emplace_back(id, StoreReply{StoreStatus::Timeout, join_keys(missing)});
      } else {
        const auto b = barriers.find(w.barrier);
        const size_t in = b == barriers.end() ? 0 : b->second.waiters.size();
        const uint32_t n = b == barriers.end() ? 0 : b->second.n;
        late.emplace_back(id, StoreReply{StoreStatus::Timeout, BRAID_STR(in, " of ", n, " arrived")});
      }
    }
    for (auto& [id, r] : late) {
      auto it = waiters.find(id);
      if (it == waiters.end()) continue;
      drop_from_barrier(id, it->second.barrier);
      finish_waiter(id, r);
    }
  }
};

StoreServer::StoreServer(StoreServerOptions options) : impl_(std::make_unique<Impl>()) {
  if (options.token.empty()) throw StoreError("store: refusing to serve without a job token");
  if (!options.log) options.log = stderr_log("braid store");
  BRAID_ASSERT(options.max_connections > 0 && options.max_unauthenticated > 0, "store connection limits must be positive");
  BRAID_ASSERT(options.max_unauthenticated_bytes >= 64, "the store's pre-handshake frame limit must fit a hello");
  impl_->opt = std::move(options);
  impl_->start();
}

StoreServer::~StoreServer() { impl_->stop(); }

int StoreServer::port() const { return impl_->acceptor.local_endpoint().port(); }
const std::string& StoreServer::host() const { return impl_->opt.host; }
const StoreServerStats& StoreServer::stats() const { return impl_->stats; }

// ---------------------------------------------------------------- client

struct StoreClient::Conn {
  asio::io_context io;
  tcp::socket sock{io};

  // Runs one asynchronous operation to completion or until `timeout`; returns its error
  // (asio::error::timed_out when the deadline passed, after which the socket is closed).
  template <typename Start>
  boost::system::error_code run(Start&& start, milliseconds timeout) {
    boost::system::error_code result = asio::error::would_block;
    start([&](boost::system::error_code ec, auto&&...) { result = ec; });
    io.restart();
    io.run_for(timeout);
    if (result == asio::error::would_block) {
      boost::system::error_code ignored;
      sock.close(ignored);
      io.restart();
      io.run();  // completes the cancelled operation
      return asio::error::timed_out;
    }
    return result;
  }
};

StoreClient::StoreClient(std::string host, int port, std::string token, StoreClientOptions options)
    : host_(std::move(host)), port_(port), token_(std::move(token)), options_(options) {
  std::lock_guard lk(mu_);
  connect_locked();
}

StoreClient::~StoreClient() = default;

void StoreClient::connect_locked() {
  conn_.reset();
  const auto deadline = Clock::now() + options_.connect_timeout;
  boost::system::error_code ec;
  const auto addr = asio::ip::make_address(host_, ec);
  if (ec) throw StoreError(BRAID_STR("store: '", host_, "' is not an IP address: ", ec.message()));
  const tcp::endpoint ep(addr, static_cast<unsigned short>(port_));
  std::string last;
  for (int attempt = 0;; ++attempt) {
    auto c = std::make_unique<Conn>();
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    open_cloexec(c->sock, ep.protocol(), ec);  // else async_connect would open it without close-on-exec
    if (ec) throw StoreError(BRAID_STR("store at ", host_, ":", port_, ": cannot create a socket: ", ec.message()));
    ec = c->run([&](auto h) { c->sock.async_connect(ep, h); }, std::max(left, milliseconds(1)));
    if (!ec) {
      c->sock.set_option(tcp::no_delay(true), ec);
      conn_ = std::move(c);
      break;
    }
    last = ec.message();
    if (Clock::now() + milliseconds(100) >= deadline)
      throw StoreError(BRAID_STR("store at ", host_, ":", port_, ": cannot connect within ",
                                 secs(options_.connect_timeout), " s (", attempt + 1, " attempts; last: ", last, ")"));
    std::this_thread::sleep_for(milliseconds(std::min(50 * (attempt + 1), 500)));
  }
  StoreRequest hello;
  hello.op = StoreOp::Hello;
  hello.version = kStoreVersion;
  hello.token = token_;
  const StoreReply r = call(hello, milliseconds(0));
  if (r.status != StoreStatus::Ok) {
    conn_.reset();
    throw StoreError(BRAID_STR("store at ", host_, ":", port_, " refused this client: ", r.payload));
  }
}

StoreReply StoreClient::call(const StoreRequest& q, milliseconds extra_wait) {
  if (!conn_) connect_locked();
  Conn& c = *conn_;
  const std::string where = BRAID_STR("store at ", host_, ":", port_, ": ", store_op_name(q.op));
  auto fail = [&](const std::string& why) -> StoreError {
    conn_.reset();  // the stream is out of step; the next call reconnects
    return StoreError(BRAID_STR(where, ": ", why));
  };
  const auto frame = encode_request(q);
  if (frame.size() - kFrameHeaderBytes > options_.max_message_bytes)
    throw StoreError(BRAID_STR(where, ": request of ", frame.size(), " bytes exceeds the message limit"));
  const milliseconds budget = options_.op_timeout + extra_wait;
  const auto deadline = Clock::now() + budget;
  auto left = [&] { return std::max(std::chrono::duration_cast<milliseconds>(deadline - Clock::now()), milliseconds(1)); };
  auto ec = c.run([&](auto h) { asio::async_write(c.sock, asio::buffer(frame), h); }, left());
  if (ec) throw fail(ec == asio::error::timed_out ? BRAID_STR("no progress sending for ", secs(budget), " s") : ec.message());
  std::array<std::byte, kFrameHeaderBytes> head{};
  ec = c.run([&](auto h) { asio::async_read(c.sock, asio::buffer(head), h); }, left());
  if (ec) throw fail(ec == asio::error::timed_out ? BRAID_STR("no reply within ", secs(budget), " s")
                     : ec == asio::error::eof ? std::string("the server closed the connection")
                                              : ec.message());
  uint64_t len = 0;
  for (size_t i = 0; i < kFrameHeaderBytes; ++i) len |= static_cast<uint64_t>(head[i]) << (8 * i);
  if (len == 0 || len > options_.max_message_bytes + 16) throw fail(BRAID_STR("reply of ", len, " bytes"));
  std::vector<std::byte> body(len);
  ec = c.run([&](auto h) { asio::async_read(c.sock, asio::buffer(body), h); }, left());
  if (ec) throw fail(ec == asio::error::timed_out ? BRAID_STR("no reply within ", secs(budget), " s") : ec.message());
  StoreReply r;
  if (auto e = parse_reply(body, r); !e.empty()) throw fail(e);
  if (r.status == StoreStatus::Error) throw fail(BRAID_STR("the server says: ", r.payload));
  return r;
}

void StoreClient::set(const std::string& key, const std::string& value) {
  std::lock_guard lk(mu_);
  StoreRequest q;
  q.op = StoreOp::Set;
  q.key = key;
  q.value = value;
  call(q, milliseconds(0));
}

std::optional<std::string> StoreClient::get(const std::string& key) {
  std::lock_guard lk(mu_);
  StoreRequest q;
  q.op = StoreOp::Get;
  q.key = key;
  StoreReply r = call(q, milliseconds(0));
  if (r.status == StoreStatus::NotFound) return std::nullopt;
  return std::move(r.payload);
}

void StoreClient::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  std::lock_guard lk(mu_);
  StoreRequest q;
  q.op = StoreOp::Wait;
  q.keys = keys;
  q.timeout_ms = static_cast<uint64_t>(std::max<int64_t>(timeout.count(), 0));
  const StoreReply r = call(q, timeout);
  if (r.status == StoreStatus::Timeout)
    throw StoreError(BRAID_STR("store at ", host_, ":", port_, ": wait timed out after ", secs(timeout),
                               " s; still missing: ", r.payload));
}

std::string StoreClient::wait_get(const std::string& key, milliseconds timeout) {
  wait({key}, timeout);
  auto v = get(key);
  if (!v) throw StoreError(BRAID_STR("store at ", host_, ":", port_, ": key '", key, "' was deleted while read"));
  return *v;
}

int64_t StoreClient::add(const std::string& key, int64_t delta) {
  std::lock_guard lk(mu_);
  StoreRequest q;
  q.op = StoreOp::Add;
  q.key = key;
  q.delta = delta;
  return decode_i64(call(q, milliseconds(0)).payload);
}

void StoreClient::barrier(const std::string& name, uint32_t n, milliseconds timeout) {
  std::lock_guard lk(mu_);
  StoreRequest q;
  q.op = StoreOp::Barrier;
  q.key = name;
  q.n = n;
  q.timeout_ms = static_cast<uint64_t>(std::max<int64_t>(timeout.count(), 0));
  const StoreReply r = call(q, timeout);
  if (r.status == StoreStatus::Timeout)
    throw StoreError(BRAID_STR("store at ", host_, ":", port_, ": barrier '", name, "' timed out after ",
                               secs(timeout), " s (", r.payload, ")"));
}

bool StoreClient::del(const std::string& key) {
  std::lock_guard lk(mu_);
  StoreRequest q;
  q.op = StoreOp::Delete;
  q.key = key;
  return call(q, milliseconds(0)).payload == std::string(1, '\1');
}

std::optional<uint64_t> StoreClient::age_ms(const std::string& key) {
  std::lock_guard lk(mu_);
  StoreRequest q;
  q.op = StoreOp::Age;
  q.key = key;
  const StoreReply r = call(q, milliseconds(0));
  if (r.status == StoreStatus::NotFound) return std::nullopt;
  return static_cast<uint64_t>(decode_i64(r.payload));
}

int64_t StoreClient::server_time_ns() {
  std::lock_guard lk(mu_);
  StoreRequest q;
  q.op = StoreOp::Time;
  return decode_i64(call(q, milliseconds(0)).payload);
}

std::unique_ptr<StoreClient> StoreClient::clone(StoreClientOptions options) const {
  return std::make_unique<StoreClient>(host_, port_, token_, options);
}

std::string StoreClient::local_address() {
  std::lock_guard lk(mu_);
  if (!conn_) connect_locked();
  boost::system::error_code ec;
  const auto ep = conn_->sock.local_endpoint(ec);
  if (ec) throw StoreError(BRAID_STR("store at ", host_, ":", port_, ": no local address: ", ec.message()));
  return ep.address().to_string();
}

// ---------------------------------------------------------------- tokens

std::string load_job_token() {
  if (const char* t = std::getenv("BRAID_JOB_TOKEN"); t && *t) return t;
  const char* path = std::getenv("BRAID_JOB_TOKEN_FILE");
  if (!path || !*path)
    throw UserError({}, "no job token: set BRAID_JOB_TOKEN or BRAID_JOB_TOKEN_FILE",
                    "braid launch makes one; for other launchers share a secret file of mode 0600 between the nodes");
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw UserError({}, BRAID_STR("cannot read the job token file ", path, ": ", std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || (st.st_mode & 077) != 0) {
    ::close(fd);
    throw UserError({}, BRAID_STR("the job token file ", path, " is readable by others (mode ",
                                  BRAID_STR(std::oct, st.st_mode & 0777), ")"),
                    BRAID_STR("chmod 600 ", path));
  }
  std::string token;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) token.append(buf, static_cast<size_t>(n));
  ::close(fd);
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
  if (token.empty()) throw UserError({}, BRAID_STR("the job token file ", path, " is empty"));
  return token;
}

std::string generate_token() {
  unsigned char raw[32];
  size_t got = 0;
  while (got < sizeof raw) {
    const ssize_t n = ::getrandom(raw + got, sizeof raw - got, 0);
    if (n < 0 && errno == EINTR) continue;
    BRAID_ASSERT(n > 0, "getrandom failed: ", std::strerror(errno));
    got += static_cast<size_t>(n);
  }
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (unsigned char b : raw) {
    s += hex[b >> 4];
    s += hex[b & 15];
  }
  return s;
}

std::string write_token_file(const std::string& dir, const std::string& token) {
  const std::string path = dir + "/job_token";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) throw StoreError(BRAID_STR("cannot create ", path, ": ", std::strerror(errno)));
  const std::string line = token + "\n";
  const ssize_t n = ::write(fd, line.data(), line.size());
  ::close(fd);
  if (n != static_cast<ssize_t>(line.size())) throw StoreError(BRAID_STR("cannot write ", path));
  return path;
}

}  // namespace braid::dist
