// The TCP backend's transport (see tcp_transport.h): mesh setup through the store, the receiver thread,
// multi-socket writes with deadlines, abort and orderly close (forming a group: tcp_transport_setup.cpp; the
// receiver's shared-memory reads: tcp_transport_shm.cpp).
// Frame: 32-byte header (u32 magic "BRDF", u8 kind, u8 flags, u16 signature length, i64 channel, u64 payload
// bytes, u64 0), the signature (what call sent it, e.g. "all_reduce(f32[4], sum)"), then the payload; with
// flag kRing the payload is in the pair's shared-memory ring instead, and the socket carries, after the
// signature, two u64 per chunk, sent once the chunk is in the ring: the ring bytes to skip before it (the
// sender rewound an empty ring to its start) and its length; with flag kDirect the socket carries the
// payload's address in the sender and a 0 (u64 each), which the receiver reads (process_vm_readv) and then
// acknowledges in the ring's header.
#include "distributed/tcp_transport.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <utility>

#include "core/error.h"
#include "distributed/tcp_socket.h"

namespace braid::dist::detail {

namespace {

constexpr uint32_t kFrameMagic = 0x46445242;      // "BRDF"
constexpr size_t kMaxAbortReason = 64 * 1024;
constexpr uint64_t kMaxFrameBytes = uint64_t{1} << 40;  // a header claiming more is corrupt
constexpr uint8_t kRing = 1;                             // header flag: the payload is in the ring
constexpr uint8_t kDirect = 2;                           // header flag: the payload is read from the sender
// The most a sender puts in a ring before telling the receiver (a smaller chunk starts the receiver's copy
// sooner; each costs a 16-byte send and receive).
constexpr uint64_t kRingChunkBytes = uint64_t{512} << 10;
// A sender that finds its ring empty 2 MiB or more from the start begins again at the start: small frames then
// keep reusing a few cache-hot MiB instead of cycling through the whole ring (1-2 MiB all-reduces on 2 ranks,
// medians of noisy runs: about 0.45 -> 0.35 and 0.75 -> 0.6 ms; rewinding from 512 KiB on made 64 MiB ~15 %
// slower, from 2 MiB it was within noise).
constexpr uint64_t kRingRewindBytes = uint64_t{2} << 20;
// A sender whose rings are full spins this long re-checking before it sleeps on the futex, and sleeps at
// most kRingSleep at a time (then re-checks its deadline, the abort flag and whether the peer is gone).
constexpr auto kRingSpin = std::chrono::microseconds(20);
constexpr auto kRingSleep = std::chrono::microseconds(10'000);

std::array<std::byte, 32> frame_header(FrameKind kind, int64_t channel, size_t sig_len, uint64_t bytes,
                                       uint8_t flags = 0) {
  std::array<std::byte, 32> h{};
  put_u(h.data(), kFrameMagic, 4);
  h[4] = static_cast<std::byte>(kind);
  h[5] = static_cast<std::byte>(flags);
  put_u(h.data() + 6, sig_len, 2);
  put_u(h.data() + 8, static_cast<uint64_t>(channel), 8);
  put_u(h.data() + 16, bytes, 8);
  return h;
}

}  // namespace

void debug(const std::string& line) {
  static const bool on = [] {
    const char* v = std::getenv("BRAID_DIST_DEBUG");
    return v && *v && std::string(v) != "0";
  }();
  if (on) std::fprintf(stderr, "braid dist: %s\n", line.c_str());
}

// ---------------------------------------------------------------- Process

std::string Process::agree(const std::string& reason) {
  if (aborted) return this->reason();
  std::lock_guard lk(agree_mu);
  try {
    if (!abort_store) {
      StoreClientOptions o;
      o.connect_timeout = std::chrono::milliseconds(2000);
      o.op_timeout = std::chrono::milliseconds(5000);
      abort_store = store->clone(o);
    }
    const std::string key = options.key_prefix + "/abort";
    if (abort_store->add(key + "/count", 1) == 1) {
      abort_store->set(key, reason);
      return reason;
    }
    return abort_store->wait_get(key, std::chrono::milliseconds(5000));
  } catch (const StoreError&) {
    return reason;  // no store (rank 0 served it and is gone): this rank's own view
  }
}

void Process::abort(const std::string& cause) {
  const std::string reason = agree(cause);
  // Holds mu throughout, so no mesh can be destroyed meanwhile (Mesh::close unregisters under mu first).
  // Lock order: Process::mu, then a Mesh's mu; nothing takes them the other way round.
  std::lock_guard lk(mu);
  if (aborted) return;  // the first reason is the cause; later ones are its consequences
  abort_reason = reason;
  aborted = true;
  for (Mesh* m : meshes) m->send_abort(reason);
  for (Mesh* m : meshes) {
    m->shutdown_sockets();
    std::lock_guard ml(m->mu);
    m->cv.notify_all();
  }
}

std::string Process::reason() {
  std::lock_guard lk(mu);
  return abort_reason;
}

// ---------------------------------------------------------------- receiving

void Mesh::receive_loop() {
  try {
    receive();
  } catch (const std::exception& e) {  // out of memory for a buffered frame: fail loudly, not terminate()
    proc->abort(BRAID_STR("tcp group ", name, " at rank ", rank, ": receiving failed: ", e.what()));
  }
}

void Mesh::receive() {
  std::vector<pollfd> fds;
  std::vector<int> who;
  while (!stopping) {
    fds.clear();
    who.clear();
    fds.push_back({wake_fd, POLLIN, 0});
    {
      std::lock_guard lk(mu);
      for (int j = 0; j < size(); ++j) {
        Peer& p = *peers[static_cast<size_t>(j)];
        if (j == rank || p.closed || p.stage == Peer::Stage::Paused) continue;
        fds.push_back({p.fd, POLLIN, 0});
        who.push_back(j);
      }
    }
    if (::poll(fds.data(), fds.size(), 1000) < 0 && errno != EINTR) break;
    if (fds[0].revents & POLLIN) {
      uint64_t v;
      ssize_t ignored = ::read(wake_fd, &v, sizeof v);
      (void)ignored;
      // Resume peers paused on a full mailbox that has room again.
      for (int j = 0; j < size(); ++j) {
        if (j == rank) continue;
        Peer& p = *peers[static_cast<size_t>(j)];
        bool resumed = false;
        {
          std::lock_guard lk(mu);
          if (p.stage != Peer::Stage::Paused) continue;
          const Key key{j, p.kind, p.channel};
          auto pit = posted.find(key);
          if (pit != posted.end()) {
            Posted* ps = pit->second;
            p.posted = ps;
            ps->size_ok = ps->bytes == p.payload_bytes;
            ps->sig = p.sig;
            ps->header = true;
            p.dst = ps->size_ok ? ps->data : nullptr;
            p.stage = Peer::Stage::Payload;
            resumed = true;
          } else if (static_cast<int>(inbox[key].size()) < proc->options.mailbox_capacity) {
            p.buffer.assign(p.payload_bytes, std::byte{0});
            p.dst = p.buffer.data();
            p.stage = Peer::Stage::Payload;
            resumed = true;
          }
        }
        if (resumed && p.payload_bytes == 0) frame_ready(j);
      }
    }
    for (size_t i = 1; i < fds.size(); ++i)
      if (fds[i].revents) on_readable(who[i - 1]);
  }
}

// Reads what peer j has sent, advancing its frame state; returns false when the peer is gone.
bool Mesh::on_readable(int j) {
  Peer& p = *peers[static_cast<size_t>(j)];
  std::array<std::byte, 65536> scratch;
  for (;;) {
    std::byte* into = nullptr;
    size_t want = 0;
    switch (p.stage) {
      case Peer::Stage::Header:
        into = p.header.data() + p.got;
        want = p.header.size() - p.got;
        break;
      case Peer::Stage::Sig:
        into = reinterpret_cast<std::byte*>(p.sig.data()) + p.got;
        want = p.sig.size() - p.got;
        break;
      case Peer::Stage::Payload: break;
      case Peer::Stage::Paused:
      case Peer::Stage::Done: return true;
    }
    if (p.stage == Peer::Stage::Payload && (p.via_direct || p.via_ring)) {
      const ShmRead got = p.via_direct ? read_direct_payload(j) : read_ring_payload(j);
      if (got == ShmRead::Again) return true;
      if (got == ShmRead::Gone) return false;
      continue;
    }
    ssize_t r;
    if (p.stage == Peer::Stage::Payload) {
      // p.posted and p.dst change under mu (unpost), so they are read under it; in_read keeps the caller's
      // memory alive (unpost waits) while recv writes into it.
      std::unique_lock lk(mu);
      want = p.payload_bytes - p.got;
      into = p.dst ? p.dst + p.got : scratch.data();
      if (!p.dst) want = std::min(want, scratch.size());
      Posted* ps = p.dst ? p.posted : nullptr;
      if (ps) ps->in_read = true;
      lk.unlock();
      r = ::recv(p.fd, into, want, MSG_DONTWAIT);
      if (ps) {
        lk.lock();
        ps->in_read = false;
        if (r > 0 && !ps->cancelled) ps->got += static_cast<uint64_t>(r);
        cv.notify_all();  // a caller may be waiting for this prefix (or, cancelled, for in_read)
      }
    } else {
      r = ::recv(p.fd, into, want, MSG_DONTWAIT);
    }
    if (r == 0) {
      lose(j, "end of stream (its process exited, crashed or was killed)");
      return false;
    }
    if (r < 0) {
      if (errno == EAGAIN || errno == EINTR) return true;
      lose(j, std::strerror(errno));
      return false;
    }
    p.got += static_cast<size_t>(r);
    if (p.stage == Peer::Stage::Header && p.got == p.header.size()) {
      if (get_u(p.header.data(), 4) != kFrameMagic) {
        lose(j, "a malformed frame (bad magic)");
        return false;
      }
      p.kind = static_cast<FrameKind>(p.header[4]);
      const auto flags = static_cast<uint8_t>(p.header[5]);
      p.via_ring = flags & kRing;
      p.via_direct = flags & kDirect;
      p.notice_got = 0;
      p.sig.assign(get_u(p.header.data() + 6, 2), '\0');
      p.channel = static_cast<int64_t>(get_u(p.header.data() + 8, 8));
      p.payload_bytes = get_u(p.header.data() + 16, 8);
      p.got = 0;
      p.stage = Peer::Stage::Sig;
      if (p.kind < FrameKind::Coll || p.kind > FrameKind::Bye || p.payload_bytes > kMaxFrameBytes ||
          (p.kind == FrameKind::Abort && p.payload_bytes > kMaxAbortReason)) {
        lose(j, "a malformed frame (bad kind or size)");
        return false;
      }
      if ((flags & ~(kRing | kDirect)) != 0 || (p.via_ring && p.via_direct) ||
          ((p.via_ring || p.via_direct) &&
           (!p.in_ring || p.payload_bytes == 0 || (p.kind != FrameKind::Coll && p.kind != FrameKind::P2P)))) {
        lose(j, "a malformed frame (bad flags, or a ring payload without a ring)");
        return false;
      }
    }
    if (p.stage == Peer::Stage::Sig && p.got == p.sig.size()) {
      p.got = 0;
      std::lock_guard lk(mu);
      p.posted = nullptr;
      p.dst = nullptr;
      p.discard = false;
      if (p.kind == FrameKind::Abort || p.kind == FrameKind::Bye) {
        p.buffer.assign(p.payload_bytes, std::byte{0});
        p.dst = p.buffer.data();
        p.stage = Peer::Stage::Payload;
      } else {
        const Key key{j, p.kind, p.channel};
        auto pit = posted.find(key);
        if (pit != posted.end()) {
          p.posted = pit->second;
          p.posted->size_ok = p.posted->bytes == p.payload_bytes;
          p.posted->sig = p.sig;
          p.posted->header = true;
          p.dst = p.posted->size_ok ? p.posted->data : nullptr;
          p.stage = Peer::Stage::Payload;
          cv.notify_all();
        } else if (p.kind == FrameKind::P2P &&
                   static_cast<int>(inbox[key].size()) >= proc->options.mailbox_capacity) {
          p.stage = Peer::Stage::Paused;  // backpressure: stop reading this peer until a recv makes room
          return true;
        } else {
          p.buffer.assign(p.payload_bytes, std::byte{0});
          p.dst = p.buffer.data();
          p.stage = Peer::Stage::Payload;
        }
      }
    }
    if (p.stage == Peer::Stage::Payload && p.got == p.payload_bytes) {
      frame_ready(j);
      if (p.closed) return false;
    }
  }
}

void Mesh::frame_ready(int j) {
  Peer& p = *peers[static_cast<size_t>(j)];
  const FrameKind kind = p.kind;
  p.stage = Peer::Stage::Header;
  p.got = 0;
  if (kind == FrameKind::Abort) {
    const std::string reason(reinterpret_cast<const char*>(p.buffer.data()), p.buffer.size());
    proc->abort(reason);
    return;
  }
  std::lock_guard lk(mu);
  if (kind == FrameKind::Bye) {
    p.closed = true;
    p.closed_reason = BRAID_STR("rank ", j, " (world rank ", p.world_rank, ") of group ", name,
                                " has closed its communicator");
  } else if (p.discard) {
    p.discard = false;  // its receiver gave up on it (unpost)
  } else if (p.posted) {
    if (!p.posted->cancelled) {
      p.posted->done = true;
      if (!p.posted->header) p.posted->sig = std::move(p.sig);  // set at the header: a caller may read it
      p.posted->header = true;
    }
    const Key key{j, kind, p.channel};
    if (auto it = posted.find(key); it != posted.end() && it->second == p.posted) posted.erase(it);
    p.posted = nullptr;
  } else if (auto it = posted.find({j, kind, p.channel}); it != posted.end()) {
    // Posted while this payload was being buffered: hand it over now.
    Posted* ps = it->second;
    ps->size_ok = ps->bytes == p.buffer.size();
    if (ps->size_ok && ps->bytes) std::memcpy(ps->data, p.buffer.data(), ps->bytes);
    ps->sig = std::move(p.sig);
    ps->done = ps->header = true;
    ps->got = ps->size_ok ? ps->bytes : 0;
    posted.erase(it);
  } else {
    inbox[{j, kind, p.channel}].push_back(Message{std::move(p.sig), std::move(p.buffer)});
  }
  p.dst = nullptr;
  cv.notify_all();
}

void Mesh::lose(int j, const std::string& why) {
  Peer& p = *peers[static_cast<size_t>(j)];
  {
    std::lock_guard lk(mu);
    if (p.closed) return;
  }
  // A peer's socket also closes when that peer exits after failing for a reason of its own; the store says
  // which failure came first, so that every rank names the same lost rank.
  const std::string mine = BRAID_STR("tcp group ", name, " at rank ", rank, ": connection to rank ", j,
                                     " (world rank ", p.world_rank, ") lost: ", why);
  const std::string first = proc->agree(mine);
  {
    std::lock_guard lk(mu);
    if (p.closed) return;
    p.closed = true;
    p.closed_reason = first == mine ? mine : BRAID_STR("the world was aborted: ", first);
    cv.notify_all();
  }
  proc->abort(first);
}

// ---------------------------------------------------------------- caller side

void Mesh::post(const Key& key, Posted& p) {
  std::lock_guard lk(mu);
  auto it = inbox.find(key);
  if (it != inbox.end() && !it->second.empty()) {
    Message& m = it->second.front();
    p.size_ok = m.payload.size() == p.bytes;
    if (p.size_ok && p.bytes) std::memcpy(p.data, m.payload.data(), p.bytes);
    p.sig = std::move(m.sig);
    p.done = p.header = true;
    p.got = p.size_ok ? p.bytes : 0;
    it->second.erase(it->second.begin());
    cv.notify_all();  // a send to itself may be waiting for room
    if (std::get<1>(key) == FrameKind::P2P) {
      const uint64_t one = 1;
      ssize_t ignored = ::write(wake_fd, &one, sizeof one);  // a paused peer may go on
      (void)ignored;
    }
    if (it->second.empty()) inbox.erase(it);
    return;
  }
  posted[key] = &p;
}

void Mesh::unpost(const Key& key, Posted& p) {
  std::unique_lock lk(mu);
  p.cancelled = true;
  if (auto it = posted.find(key); it != posted.end() && it->second == &p) posted.erase(it);
  cv.wait(lk, [&] { return !p.in_read; });
  for (auto& peer : peers)
    if (peer && peer->posted == &p) {  // mid-frame: the rest of it is read and dropped
      peer->posted = nullptr;
      peer->dst = nullptr;
      peer->discard = true;
    }
}

std::string Mesh::take(const std::vector<std::pair<Key, Posted*>>& entries, Clock::time_point deadline) {
  return wait_entries(entries, nullptr, deadline);
}

std::string Mesh::wait_entries(const std::vector<std::pair<Key, Posted*>>& entries,
                               const std::function<bool(const Posted&)>& enough, Clock::time_point deadline) {
  std::string error;
  bool aborted = false;
  {
    std::unique_lock lk(mu);
    auto gone = [&](const std::pair<Key, Posted*>& e) {
      return !e.second->done && peers[static_cast<size_t>(std::get<0>(e.first))]->closed;
    };
    auto ready = [&] {
      if (proc->aborted) return true;
      for (const auto& e : entries)
        if (!e.second->done && !(enough && enough(*e.second)) && !gone(e)) return false;
      return true;
    };
    const bool in_time = cv.wait_until(lk, deadline, ready);
    bool all = true;
    for (const auto& e : entries) all = all && (e.second->done || (enough && enough(*e.second)));
    if (all) return {};
    aborted = proc->aborted;  // its reason is read below, without mu (lock order)
    for (const auto& e : entries)
      if (!aborted && error.empty() && gone(e)) error = peers[static_cast<size_t>(std::get<0>(e.first))]->closed_reason;
    if (!aborted && error.empty() && !in_time) {
      std::string missing;
      for (const auto& e : entries)
        if (!e.second->done) {
          const int j = std::get<0>(e.first);
          missing += BRAID_STR(missing.empty() ? "" : ", ", j, " (world rank ", world_ranks[static_cast<size_t>(j)], ")");
        }
      error = BRAID_STR("timed out after ", secs(proc->options.timeout), " s waiting for ranks [", missing, "]");
    }
  }
  if (aborted) error = BRAID_STR("the world was aborted: ", proc->reason());
  for (const auto& e : entries)
    if (!e.second->done) unpost(e.first, *e.second);
  return error;
}

// Every listed peer's frame at once. A socket frame is written with non-blocking sendmsg and poll; a ring
// frame puts a chunk into the peer's ring whenever there is room and sends its length behind the header, one
// chunk per peer per turn so that every receiver has work early; a direct frame sends the payload's address
// and waits for the receiver's acknowledgement (it has copied the payload). Waiting: poll for sockets; for
// rings only, a short spin, then a futex sleep of at most kRingSleep (re-checking the deadline, abort and lost
// peers). Returning early, it cancels its unacknowledged direct frames: the caller may reuse the memory.
std::string Mesh::write(const std::vector<Out>& outs, Clock::time_point deadline) {
  struct W {
    Peer* peer;
    int j;
    std::array<std::byte, 32> header;
    std::string sig;
    iovec iov[3];                   // header, signature, then the payload or (ring) a chunk's length
    ShmRing* ring = nullptr;        // the payload goes through this ring
    const std::byte* src = nullptr; // ring: payload not yet in the ring
    uint64_t src_left = 0;
    uint64_t direct = 0;            // a direct frame: its number (acknowledged once the peer has copied it)
    std::array<std::byte, 16> notice{};
  };
  std::vector<W> ws(outs.size());
  std::vector<std::unique_lock<std::mutex>> locks;
  std::vector<size_t> order(outs.size());
  for (size_t i = 0; i < outs.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return outs[a].peer < outs[b].peer; });
  for (size_t i : order) locks.emplace_back(peers[static_cast<size_t>(outs[i].peer)]->write_mu);
  for (size_t i = 0; i < outs.size(); ++i) {
    const Out& o = outs[i];
    W& w = ws[i];
    w.peer = peers[static_cast<size_t>(o.peer)].get();
    w.j = o.peer;
    w.sig = o.sig.substr(0, 0xffff);
    const bool ring = w.peer->out_ring && o.bytes >= std::max<uint64_t>(proc->options.shm_min_bytes, 1) &&
                      (o.kind == FrameKind::Coll || o.kind == FrameKind::P2P);
    const bool direct = ring && proc->options.shm_direct && o.bytes >= proc->options.shm_direct_min_bytes &&
                        w.peer->out_direct;
    w.header = frame_header(o.kind, o.channel, w.sig.size(), o.bytes, direct ? kDirect : ring ? kRing : 0);
    w.iov[0] = {w.header.data(), w.header.size()};
    w.iov[1] = {w.sig.data(), w.sig.size()};
    if (direct) {
      w.ring = w.peer->out_ring.get();
      w.direct = w.ring->next_direct();
      put_u(w.notice.data(), reinterpret_cast<uint64_t>(o.data), 8);
      w.iov[2] = {w.notice.data(), w.notice.size()};
      ring_bytes_sent.fetch_add(o.bytes, std::memory_order_relaxed);
      direct_bytes_sent.fetch_add(o.bytes, std::memory_order_relaxed);
    } else if (ring) {
      w.ring = w.peer->out_ring.get();
      w.src = o.data;
      w.src_left = o.bytes;
      w.iov[2] = {w.notice.data(), 0};
      ring_bytes_sent.fetch_add(o.bytes, std::memory_order_relaxed);
    } else {
      w.iov[2] = {const_cast<std::byte*>(o.data), o.bytes};
      socket_bytes_sent.fetch_add(o.bytes, std::memory_order_relaxed);
    }
  }
  auto on_socket = [](const W& w) {
    size_t n = 0;
    for (int k = 0; k < 3; ++k) n += w.iov[k].iov_len;
    return n;
  };
  auto stuck = [&](const std::vector<W*>& ps) {
    std::string s;
    for (W* w : ps) s += BRAID_STR(s.empty() ? "" : ", ", w->j, " (world rank ", w->peer->world_rank, ")");
    return s;
  };
  auto unacked = [](const W& w) { return w.direct && !w.ring->acked(w.direct); };
  auto give_up = [&](std::string why) {
    for (auto& w : ws)
      if (unacked(w)) w.ring->cancel(w.direct);
    return why;
  };
  std::vector<pollfd> fds;
  std::vector<W*> pending, on_sockets, on_rings;
  for (;;) {
    pending.clear();
    for (auto& w : ws)
      if (on_socket(w) > 0 || w.src_left > 0 || unacked(w)) pending.push_back(&w);
    if (pending.empty()) return {};
    if (proc->aborted) return give_up(BRAID_STR("the world was aborted: ", proc->reason()));
    on_sockets.clear();
    on_rings.clear();
    for (W* w : pending) {
      // One turn: a chunk into the ring if the socket has taken everything before it, then the socket.
      if (w->direct && on_socket(*w) == 0) {
        on_rings.push_back(w);  // waiting for the acknowledgement
        continue;
      }
      if (w->ring && !w->direct && on_socket(*w) == 0) {
        const uint64_t c = std::min({w->ring->space(), w->src_left, std::min(kRingChunkBytes, w->ring->capacity())});
        if (c > 0) {
          const uint64_t skip = w->ring->rewind(kRingRewindBytes);
          const uint64_t c2 = std::min(c, w->ring->space());
          w->ring->put(w->src, c2);
          std::atomic_thread_fence(std::memory_order_release);  // the chunk before its length
          w->src += c2;
          w->src_left -= c2;
          put_u(w->notice.data(), skip, 8);
          put_u(w->notice.data() + 8, c2, 8);
          w->iov[2] = {w->notice.data(), w->notice.size()};
        } else {
          on_rings.push_back(w);
          continue;
        }
      }
      if (on_socket(*w) == 0) continue;
      msghdr m{};
      m.msg_iov = w->iov;
      m.msg_iovlen = 3;
      const ssize_t n = ::sendmsg(w->peer->wfd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) {
          on_sockets.push_back(w);
          continue;
        }
        lose(w->j, std::strerror(errno));  // the same words as when the receiver notices first
        std::lock_guard lk(mu);
        return give_up(w->peer->closed_reason);
      }
      size_t adv = static_cast<size_t>(n);
      for (int k = 0; k < 3 && adv > 0; ++k) {
        const size_t take_n = std::min(adv, w->iov[k].iov_len);
        w->iov[k].iov_base = static_cast<char*>(w->iov[k].iov_base) + take_n;
        w->iov[k].iov_len -= take_n;
        adv -= take_n;
      }
      if (on_socket(*w) > 0 && !w->ring) on_sockets.push_back(w);
    }
    if (on_sockets.size() + on_rings.size() < pending.size()) continue;  // a peer can go on at once
    if (Clock::now() >= deadline) {
      std::vector<W*> all = on_sockets;
      all.insert(all.end(), on_rings.begin(), on_rings.end());
      return give_up(BRAID_STR("timed out after ", secs(proc->options.timeout), " s sending to ranks [", stuck(all),
                               "]: they are not reading"));
    }
    if (!on_rings.empty()) {
      // A ring only drains while its reader lives: a reader that closed its communicator never will.
      std::lock_guard lk(mu);
      for (W* w : on_rings)
        if (w->peer->closed) return give_up(w->peer->closed_reason);
    }
    if (!on_sockets.empty()) {
      fds.clear();
      for (W* w : on_sockets) fds.push_back({w->peer->wfd, POLLOUT, 0});
      ::poll(fds.data(), fds.size(), on_rings.empty() ? ms_left(deadline, 200) : std::min(ms_left(deadline, 1), 1));
      continue;
    }
    std::vector<ShmRing*> rings;
    for (W* w : on_rings) rings.push_back(w->ring);
    auto room = [&] {
      for (W* w : on_rings)
        if (w->direct ? w->ring->acked(w->direct) : w->ring->space() > 0) return true;
      return false;
    };
    // No spin for direct frames only: their copies (2 MiB and more) take far longer than a spin.
    bool only_direct = true;
    for (W* w : on_rings) only_direct = only_direct && w->direct;
    const auto spin_end = Clock::now() + (only_direct ? Clock::duration::zero() : kRingSpin);
    bool found = false;
    while (!found && Clock::now() < spin_end) {
      for (int k = 0; k < 64 && !found; ++k) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
        found = room();
      }
    }
    if (!found)
      ShmRing::wait(rings, room, std::min<std::chrono::microseconds>(
                                         kRingSleep, std::chrono::duration_cast<std::chrono::microseconds>(deadline - Clock::now()) +
                                                         std::chrono::microseconds(1)));
  }
}

std::string Mesh::send_to_self(int64_t tag, const std::string& sig, const std::byte* data, uint64_t bytes,
                               Clock::time_point deadline) {
  const Key key{rank, FrameKind::P2P, tag};
  std::unique_lock lk(mu);
  const int cap = proc->options.mailbox_capacity;
  auto room = [&] { return proc->aborted || static_cast<int>(inbox[key].size()) < cap; };
  if (!cv.wait_until(lk, deadline, room))
    return BRAID_STR("timed out after ", secs(proc->options.timeout), " s: the mailbox is full (capacity ", cap,
                     ") and this rank has not received from it");
  if (proc->aborted) return "the world was aborted";
  inbox[key].push_back(Message{sig, std::vector<std::byte>(data, data + bytes)});
  cv.notify_all();
  return {};
}

void Mesh::wake() {
  const uint64_t one = 1;
  ssize_t ignored = ::write(wake_fd, &one, sizeof one);
  (void)ignored;
}

void Mesh::send_abort(const std::string& reason) {
  const std::string r = reason.substr(0, kMaxAbortReason);
  const auto header = frame_header(FrameKind::Abort, 0, 0, r.size());
  const auto deadline = Clock::now() + std::chrono::milliseconds(500);
  for (int j = 0; j < size(); ++j) {
    if (j == rank) continue;
    Peer& p = *peers[static_cast<size_t>(j)];
    std::unique_lock wl(p.write_mu, std::try_to_lock);
    if (!wl.owns_lock()) continue;  // mid-frame: the peer learns from the closed socket instead
    if (write_exact(p.wfd, header.data(), header.size(), deadline).empty())
      write_exact(p.wfd, r.data(), r.size(), deadline);
  }
}

void Mesh::shutdown_sockets() {
  for (auto& p : peers)
    for (int f : {p ? p->fd : -1, p ? p->wfd : -1})
      if (f >= 0) ::shutdown(f, SHUT_RDWR);
}

void Mesh::close() {
  {
    std::lock_guard lk(proc->mu);
    proc->meshes.erase(std::remove(proc->meshes.begin(), proc->meshes.end(), this), proc->meshes.end());
  }
  // The slow parts first (joining the receiver, unmapping the rings), the bye last: a peer may stop as soon
  // as it reads the bye, and its launcher stop this process, so that this process should be done by then
  // with everything but the little left before it reports why it closed.
  stopping = true;
  if (receiver.joinable()) {
    wake();
    receiver.join();
  }
  for (auto& p : peers)
    if (p) {
      std::lock_guard wl(p->write_mu);  // no writer is left: a communicator is not used while it closes
      p->out_ring.reset();
      p->in_ring.reset();
    }
  if (!proc->aborted) {
    const auto header = frame_header(FrameKind::Bye, 0, 0, 0);
    const auto deadline = Clock::now() + std::chrono::milliseconds(1000);
    for (int j = 0; j < size(); ++j) {
      if (j == rank || !peers[static_cast<size_t>(j)] || peers[static_cast<size_t>(j)]->wfd < 0) continue;
      std::lock_guard wl(peers[static_cast<size_t>(j)]->write_mu);
      write_exact(peers[static_cast<size_t>(j)]->wfd, header.data(), header.size(), deadline);
    }
  }
  for (auto& p : peers)
    for (int* f : {p ? &p->fd : nullptr, p ? &p->wfd : nullptr})
      if (f && *f >= 0) ::close(std::exchange(*f, -1));
  if (wake_fd >= 0) ::close(std::exchange(wake_fd, -1));
}

Mesh::~Mesh() { close(); }

}  // namespace braid::dist::detail
