// Socket primitives of the TCP backend (tcp_socket.h).
#include "distributed/tcp_socket.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace braid::dist::detail {

using Clock = std::chrono::steady_clock;

int ms_left(Clock::time_point deadline, int cap_ms) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(ms, 0, cap_ms));
}

void put_u(std::byte* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
}
uint64_t get_u(const std::byte* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

std::string write_exact(int fd, const void* p, size_t n, Clock::time_point deadline) {
  auto* b = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::send(fd, b, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      b += w;
      n -= static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno != EAGAIN && errno != EINTR) return std::strerror(errno);
    pollfd pf{fd, POLLOUT, 0};
    if (Clock::now() >= deadline) return "timed out";
    ::poll(&pf, 1, ms_left(deadline, 1000));
  }
  return {};
}

std::string read_exact(int fd, void* p, size_t n, Clock::time_point deadline) {
  auto* b = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t r = ::recv(fd, b, n, MSG_DONTWAIT);
    if (r > 0) {
      b += r;
      n -= static_cast<size_t>(r);
      continue;
    }
    if (r == 0) return "end of stream";
    if (errno != EAGAIN && errno != EINTR) return std::strerror(errno);
    pollfd pf{fd, POLLIN, 0};
    if (Clock::now() >= deadline) return "timed out";
    ::poll(&pf, 1, ms_left(deadline, 1000));
  }
  return {};
}

void tune(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  set_nonblocking(fd);
}

int connect_to(const std::string& host, const std::string& port, Clock::time_point deadline, std::string& err) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    err = BRAID_STR("cannot resolve ", host, ": ", gai_strerror(rc));
    return -1;
  }
  int attempt = 0;
  for (;; ++attempt) {
    const int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
      err = std::strerror(errno);
      break;
    }
    int rc = ::connect(fd, res->ai_addr, res->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd pf{fd, POLLOUT, 0};
      if (::poll(&pf, 1, ms_left(deadline)) == 1) {
        int soerr = 0;
        socklen_t len = sizeof soerr;
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len);
        rc = soerr == 0 ? 0 : -1;
        errno = soerr;
      } else {
        errno = ETIMEDOUT;
      }
    }
    if (rc == 0) {
      ::freeaddrinfo(res);
      return fd;
    }
    err = std::strerror(errno);
    ::close(fd);
    if (Clock::now() + std::chrono::milliseconds(50) >= deadline) break;
    ::poll(nullptr, 0, std::min(20 * (attempt + 1), 200));
  }
  ::freeaddrinfo(res);
  err = BRAID_STR("cannot connect to ", host, ":", port, " (", attempt + 1, " attempts; last: ", err, ")");
  return -1;
}

}  // namespace braid::dist::detail
