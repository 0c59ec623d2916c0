// Forming a group of the TCP backend's transport (tcp_transport.h): the connections between every pair of
// members through the store (Mesh::connect), then shared-memory rings between members on one host
// (Mesh::setup_shm).
#include "distributed/tcp_transport.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
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
constexpr uint32_t kHandshakeMagic = 0x48445242;  // "BRDH"
}  // namespace

void Mesh::connect(const std::string& group_id, StoreClient& store) {
  const TcpCommOptions& opt = proc->options;
  const std::string prefix = BRAID_STR(opt.key_prefix, "/", group_id);
  const auto deadline = Clock::now() + opt.connect_timeout;
  const int n = size();
  peers.resize(static_cast<size_t>(n));
  for (int j = 0; j < n; ++j) {
    peers[static_cast<size_t>(j)] = std::make_unique<Peer>();
    peers[static_cast<size_t>(j)]->world_rank = world_ranks[static_cast<size_t>(j)];
  }
  auto where = [&] { return BRAID_STR("tcp group ", name, " at rank ", rank); };

  // 1. Listen on an ephemeral port of the advertised address and publish it.
  const std::string host = opt.bind_host.empty() ? store.local_address() : opt.bind_host;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), "0", &hints, &res); rc != 0)
    throw CommError(BRAID_STR(where(), ": cannot listen on '", host, "': ", gai_strerror(rc)));
  const int lfd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  const bool bound = lfd >= 0 && ::bind(lfd, res->ai_addr, res->ai_addrlen) == 0 && ::listen(lfd, n + 16) == 0;
  ::freeaddrinfo(res);
  if (!bound) {
    const std::string e = std::strerror(errno);
    if (lfd >= 0) ::close(lfd);
    throw CommError(BRAID_STR(where(), ": cannot listen on ", host, ": ", e));
  }
  sockaddr_storage sa{};
  socklen_t sl = sizeof sa;
  ::getsockname(lfd, reinterpret_cast<sockaddr*>(&sa), &sl);
  const int port = ntohs(sa.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&sa)->sin6_port
                                                  : reinterpret_cast<sockaddr_in*>(&sa)->sin_port);
  const std::string addr = host.find(':') != std::string::npos ? BRAID_STR("[", host, "]:", port) : BRAID_STR(host, ":", port);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{lfd};
  store.set(BRAID_STR(prefix, "/addr/", rank), addr);

  auto fail = [&](const std::string& why) {
    for (auto& p : peers)
      for (int* f : {&p->fd, &p->wfd})  // every peer exists (made above)
        if (*f >= 0) ::close(std::exchange(*f, -1));
    throw CommError(BRAID_STR(where(), ": ", why));
  };

  // 2. Connect to every lower rank and prove the secret.
  std::vector<std::byte> hello;
  auto put = [&](uint64_t v, int bytes) {
    hello.resize(hello.size() + static_cast<size_t>(bytes));
    put_u(hello.data() + hello.size() - static_cast<size_t>(bytes), v, bytes);
  };
  put(kHandshakeMagic, 4);
  put(group_id.size(), 2);
  for (char c : group_id) hello.push_back(static_cast<std::byte>(c));
  put(proc->secret.size(), 2);
  for (char c : proc->secret) hello.push_back(static_cast<std::byte>(c));
  put(static_cast<uint32_t>(rank), 4);
  put(0, 1);  // the direction: 0 = the connecting rank writes on it, 1 = the accepting rank does
  for (int j = 0; j < rank; ++j) {
    std::string their;
    try {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      their = store.wait_get(BRAID_STR(prefix, "/addr/", j), std::max(left, std::chrono::milliseconds(1)));
    } catch (const StoreError& e) {
      fail(BRAID_STR("rank ", j, " (world rank ", world_ranks[static_cast<size_t>(j)],
                     ") did not publish its address: ", e.what()));
    }
    const size_t colon = their.rfind(':');
    std::string h = their.substr(0, colon);
    if (h.size() > 1 && h.front() == '[') h = h.substr(1, h.size() - 2);
    for (uint8_t dir : {0, 1}) {  // this rank's writing connection, then its reading one
      std::string err;
      const int fd = connect_to(h, their.substr(colon + 1), deadline, err);
      if (fd < 0) fail(BRAID_STR("rank ", j, " at ", their, ": ", err));
      (dir == 0 ? peers[static_cast<size_t>(j)]->wfd : peers[static_cast<size_t>(j)]->fd) = fd;
      tune(fd);
      hello.back() = static_cast<std::byte>(dir);
      if (auto e = write_exact(fd, hello.data(), hello.size(), deadline); !e.empty())
        fail(BRAID_STR("handshake with rank ", j, " at ", their, ": ", e));
      char ack = 0;
      if (auto e = read_exact(fd, &ack, 1, deadline); !e.empty() || ack != 'K')
        fail(BRAID_STR("rank ", j, " at ", their, " did not accept the handshake (", e.empty() ? "refused" : e, ")"));
    }
  }

  // 3. Accept every higher rank's two connections; those that fail the handshake are closed and counted,
  // never fatal.
  int need = 2 * (n - 1 - rank), rejected = 0;
  while (need > 0) {
    pollfd pf{lfd, POLLIN, 0};
    if (::poll(&pf, 1, ms_left(deadline, 1000)) <= 0) {
      if (Clock::now() < deadline) continue;
      std::string missing;
      for (int j = rank + 1; j < n; ++j)
        if (peers[static_cast<size_t>(j)]->fd < 0 || peers[static_cast<size_t>(j)]->wfd < 0)
          missing += BRAID_STR(missing.empty() ? "" : ", ", j);
      fail(BRAID_STR("timed out after ", secs(opt.connect_timeout), " s waiting for ranks [", missing,
                     "] to connect (", rejected, " connections failed the handshake)"));
    }
    const int fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) continue;
    const auto hs_deadline = std::min(deadline, Clock::now() + std::chrono::seconds(10));
    std::array<std::byte, 6> head{};
    std::string gid, secret;
    uint32_t who = 0;
    bool ok = read_exact(fd, head.data(), head.size(), hs_deadline).empty() && get_u(head.data(), 4) == kHandshakeMagic;
    if (ok) {
      gid.resize(get_u(head.data() + 4, 2));
      ok = read_exact(fd, gid.data(), gid.size(), hs_deadline).empty() && gid == group_id;
    }
    std::array<std::byte, 2> slen{};
    if (ok) ok = read_exact(fd, slen.data(), 2, hs_deadline).empty();
    if (ok) {
      secret.resize(get_u(slen.data(), 2));
      ok = read_exact(fd, secret.data(), secret.size(), hs_deadline).empty() &&
           constant_time_equal(secret, proc->secret);
    }
    std::array<std::byte, 5> rb{};
    if (ok) ok = read_exact(fd, rb.data(), 5, hs_deadline).empty();
    who = static_cast<uint32_t>(get_u(rb.data(), 4));
    const auto dir = static_cast<uint8_t>(rb[4]);  // 0: the peer writes on it (this rank reads)
    if (ok) ok = static_cast<int>(who) > rank && static_cast<int>(who) < n && dir <= 1 &&
                 (dir == 0 ? peers[who]->fd : peers[who]->wfd) < 0;
    if (!ok) {
      ++rejected;
      std::fprintf(stderr, "braid tcp: %s: closed a connection that failed the handshake\n", where().c_str());
      ::close(fd);
      continue;
    }
    tune(fd);
    const char ack = 'K';
    if (!write_exact(fd, &ack, 1, hs_deadline).empty()) {
      ::close(fd);
      continue;
    }
    (dir == 0 ? peers[who]->fd : peers[who]->wfd) = fd;
    --need;
  }

  // 4. Shared-memory rings with the peers on this host.
  setup_shm(prefix, store, deadline);

  // 5. Start receiving; register with the process so that an abort reaches this group.
  wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  BRAID_ASSERT(wake_fd >= 0, "eventfd: ", std::strerror(errno));
  {
    std::lock_guard lk(proc->mu);
    proc->meshes.push_back(this);
  }
  receiver = std::thread([this] { receive_loop(); });
}

// Same-host peers get a ring per direction, agreed through the store (keys under <prefix>/shm/):
//   host/<r>   this rank's same_host_key(), "" when shared memory is off here;
//   ring/<s>.<r>  the segment that receiver r made for sender s ("" if it could not);
//   ack/<s>.<r>   "1" once sender s has mapped it (and unlinked the name), "0" if it could not;
//   direct/<s>.<r>  "1" if receiver r could read sender s's memory (process_vm_readv), so s may send direct.
// Each step only waits for keys that every member writes in an earlier step, so no member waits on another
// in a cycle. Every failure leaves that direction on the socket, which both ends agree on without further
// talk: a sender uses a ring only if it mapped one, and a receiver accepts ring frames whenever it made one.
void Mesh::setup_shm(const std::string& prefix, StoreClient& store, Clock::time_point deadline) {
  const TcpCommOptions& opt = proc->options;
  const int n = size();
  auto who = [&](int j) { return BRAID_STR("tcp group ", name, " at rank ", rank, ": rank ", j, " (world rank ",
                                           world_ranks[static_cast<size_t>(j)], ")"); };
  auto wait_for = [&](const std::string& key) -> std::optional<std::string> {
    try {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      return store.wait_get(key, std::max(left, std::chrono::milliseconds(1)));
    } catch (const StoreError& e) {
      debug(BRAID_STR("tcp group ", name, " at rank ", rank, ": no shared memory: ", e.what()));
      return std::nullopt;
    }
  };
  const std::string key = opt.shm && opt.shm_ring_bytes > 0 ? same_host_key() : "";
  if (opt.shm && key.empty()) debug(BRAID_STR("tcp group ", name, " at rank ", rank, ": no shared memory: cannot tell the host"));
  try {
    store.set(BRAID_STR(prefix, "/shm/host/", rank), key);
  } catch (const StoreError& e) {
    debug(BRAID_STR("tcp group ", name, " at rank ", rank, ": no shared memory: ", e.what()));
    return;
  }
  if (key.empty()) return;
  std::vector<char> same(static_cast<size_t>(n), 0);
  for (int j = 0; j < n; ++j) {
    if (j == rank) continue;
    const auto theirs = wait_for(BRAID_STR(prefix, "/shm/host/", j));
    if (!theirs) return;  // the store is gone: nothing was made yet
    same[static_cast<size_t>(j)] = *theirs == key;
    if (!same[static_cast<size_t>(j)]) debug(BRAID_STR(who(j), ": socket (another host, or shared memory off there)"));
  }
  // As receiver: a ring for every same-host sender.
  std::vector<std::string> made(static_cast<size_t>(n));
  for (int j = 0; j < n; ++j) {
    if (!same[static_cast<size_t>(j)]) continue;
    std::string err, seg;
    auto ring = ShmRing::create(opt.shm_ring_bytes, seg, err);
    if (!ring) debug(BRAID_STR(who(j), ": socket: ", err));
    try {
      store.set(BRAID_STR(prefix, "/shm/ring/", j, ".", rank), ring ? seg : "");
    } catch (const StoreError& e) {
      debug(BRAID_STR(who(j), ": socket: ", e.what()));
      ring.reset();
    }
    if (ring) {
      peers[static_cast<size_t>(j)]->in_ring = std::move(ring);
      made[static_cast<size_t>(j)] = seg;
    } else if (!seg.empty()) {
      ShmRing::unlink(seg);
    }
  }
  // As sender: map every ring made for this rank, unlink its name at once, and say so.
  for (int j = 0; j < n; ++j) {
    if (!same[static_cast<size_t>(j)]) continue;
    const auto seg = wait_for(BRAID_STR(prefix, "/shm/ring/", rank, ".", j));
    if (!seg || seg->empty()) continue;
    std::string err;
    auto ring = ShmRing::open(*seg, err);
    ShmRing::unlink(*seg);
    if (!ring) debug(BRAID_STR(who(j), ": socket: ", err));
    try {
      store.set(BRAID_STR(prefix, "/shm/ack/", rank, ".", j), ring ? "1" : "0");
    } catch (const StoreError& e) {
      debug(BRAID_STR(who(j), ": socket: ", e.what()));
      ring.reset();  // the receiver keeps its ring mapped, unused
    }
    if (ring) {
      debug(BRAID_STR(who(j), ": shared memory (", ring->capacity(), "-byte ring)"));
      peers[static_cast<size_t>(j)]->out_ring = std::move(ring);
    }
  }
  // As receiver: unlink the names (if the sender has not) and drop rings a sender could not map.
  for (int j = 0; j < n; ++j) {
    if (made[static_cast<size_t>(j)].empty()) continue;
    const auto ack = wait_for(BRAID_STR(prefix, "/shm/ack/", j, ".", rank));
    ShmRing::unlink(made[static_cast<size_t>(j)]);
    Peer& p = *peers[static_cast<size_t>(j)];
    if (ack && *ack == "0") p.in_ring.reset();
    const bool direct = ack && *ack == "1" && opt.shm_direct && p.in_ring->probe_producer();
    if (ack && *ack == "1" && opt.shm_direct)
      debug(BRAID_STR(who(j), direct ? ": reads its payloads from its memory (one copy)"
                                     : ": cannot read its memory (process_vm_readv): ring only"));
    try {
      store.set(BRAID_STR(prefix, "/shm/direct/", j, ".", rank), direct ? "1" : "0");
    } catch (const StoreError& e) {
      debug(BRAID_STR(who(j), ": ", e.what()));
    }
  }
  // As sender: go direct where the receiver could read this rank's memory.
  for (int j = 0; j < n; ++j) {
    Peer& p = *peers[static_cast<size_t>(j)];
    if (j == rank || !p.out_ring) continue;
    const auto direct = wait_for(BRAID_STR(prefix, "/shm/direct/", rank, ".", j));
    p.out_direct = direct && *direct == "1";
  }
}

}  // namespace braid::dist::detail
