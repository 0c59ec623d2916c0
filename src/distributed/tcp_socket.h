// Socket primitives of the TCP backend (tcp_transport.cpp): deadlines in milliseconds, little-endian integer
// fields, exact reads and writes on non-blocking sockets bounded by a deadline, socket options, and connecting
// with retries.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace braid::dist::detail {

// Milliseconds until `deadline`, clamped to [0, cap_ms] (for poll).
int ms_left(std::chrono::steady_clock::time_point deadline, int cap_ms = 1 << 30);
// `bytes` little-endian bytes of v at p, and back.
void put_u(std::byte* p, uint64_t v, int bytes);
uint64_t get_u(const std::byte* p, int bytes);
void set_nonblocking(int fd);
// Blocking-style exact I/O on a non-blocking socket, bounded by deadline. Returns "" or the error.
std::string write_exact(int fd, const void* p, size_t n, std::chrono::steady_clock::time_point deadline);
std::string read_exact(int fd, void* p, size_t n, std::chrono::steady_clock::time_point deadline);
// TCP_NODELAY and non-blocking.
void tune(int fd);
// host:port -> a connected socket (retrying refusals until the deadline), or -1 and `err`.
int connect_to(const std::string& host, const std::string& port, std::chrono::steady_clock::time_point deadline,
               std::string& err);

}  // namespace braid::dist::detail
