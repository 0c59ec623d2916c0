// The receiver thread's reads of ring and direct payloads from same-host peers (tcp_transport.h; the frame
// format is in tcp_transport.cpp, the rings' setup in tcp_transport_setup.cpp).
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "distributed/tcp_socket.h"
#include "distributed/tcp_transport.h"

namespace braid::dist::detail {

namespace {

// A direct payload is copied in pieces of this size, each made visible to a caller waiting for a prefix.
constexpr uint64_t kDirectPieceBytes = uint64_t{1} << 20;

// Copies c bytes of peer p's frame into its destination with copy(into) (into is nullptr when the frame has
// none: copy still consumes the bytes). p.posted and p.dst change under mu (unpost), so they are read under it;
// in_read keeps the caller's memory alive (unpost waits) while the copy writes into it; a caller waiting for a
// prefix is told. Returns copy's result (false: nothing counted).
template <typename Copy>
bool copy_to_destination(Mesh& m, Peer& p, uint64_t c, const Copy& copy) {
  std::unique_lock lk(m.mu);
  std::byte* into = p.dst ? p.dst + p.got : nullptr;
  Posted* ps = p.dst ? p.posted : nullptr;
  if (ps) ps->in_read = true;
  lk.unlock();
  const bool ok = copy(into);
  if (ps) {
    lk.lock();
    ps->in_read = false;
    if (ok && !ps->cancelled) ps->got += c;
    m.cv.notify_all();
  }
  return ok;
}

}  // namespace

// ---------------------------------------------------------------- receiving ring and direct payloads

std::optional<Mesh::ShmRead> Mesh::read_notice(int j) {
  Peer& p = *peers[static_cast<size_t>(j)];
  while (p.notice_got < p.notice.size()) {
    const ssize_t r = ::recv(p.fd, p.notice.data() + p.notice_got, p.notice.size() - p.notice_got, MSG_DONTWAIT);
    if (r == 0) {
      lose(j, "end of stream (its process exited, crashed or was killed)");
      return ShmRead::Gone;
    }
    if (r < 0) {
      if (errno == EAGAIN || errno == EINTR) return ShmRead::Again;
      lose(j, std::strerror(errno));
      return ShmRead::Gone;
    }
    p.notice_got += static_cast<size_t>(r);
  }
  p.notice_got = 0;
  return std::nullopt;
}

// The socket says where the payload is in the sender's memory; it is copied straight to its destination.
Mesh::ShmRead Mesh::read_direct_payload(int j) {
  Peer& p = *peers[static_cast<size_t>(j)];
  if (auto r = read_notice(j)) return *r;
  const uint64_t addr = get_u(p.notice.data(), 8);
  const uint64_t k = p.in_ring->take_direct();
  while (p.got < p.payload_bytes) {
    const uint64_t c = std::min(kDirectPieceBytes, p.payload_bytes - p.got);
    int err = 0;
    const bool ok = copy_to_destination(*this, p, c, [&](std::byte* into) {
      const bool done = !into || p.in_ring->read_direct(into, addr + p.got, c);
      err = errno;
      return done;
    });
    if (!ok) {
      lose(j, p.in_ring->cancelled(k) ? "it gave up sending a frame"
                                      : BRAID_STR("reading its memory failed: ", std::strerror(err)));
      return ShmRead::Gone;
    }
    p.got += c;
  }
  // Checked after the copy: a sender that gave up before may have reused the memory read.
  if (p.in_ring->cancelled(k)) {
    lose(j, "it gave up sending a frame");
    return ShmRead::Gone;
  }
  p.in_ring->ack_direct();
  frame_ready(j);
  return p.closed ? ShmRead::Gone : ShmRead::More;
}

// The socket says how long the next chunk in the ring is; it is there already (put before the length was
// sent), and is copied into the frame's destination as a socket payload is.
Mesh::ShmRead Mesh::read_ring_payload(int j) {
  Peer& p = *peers[static_cast<size_t>(j)];
  if (auto r = read_notice(j)) return *r;
  const uint64_t skip = get_u(p.notice.data(), 8), c = get_u(p.notice.data() + 8, 8);
  if (c == 0 || c > p.payload_bytes - p.got || c > p.in_ring->capacity() || skip >= p.in_ring->capacity()) {
    lose(j, "a malformed frame (bad ring chunk length)");
    return ShmRead::Gone;
  }
  std::atomic_thread_fence(std::memory_order_acquire);
  copy_to_destination(*this, p, c, [&](std::byte* into) {
    p.in_ring->take(into, c, skip);
    return true;
  });
  p.got += c;
  if (p.got == p.payload_bytes) {
    frame_ready(j);
    if (p.closed) return ShmRead::Gone;
  }
  return ShmRead::More;
}

}  // namespace braid::dist::detail
