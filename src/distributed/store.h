// The rendezvous store: a small key-value server over TCP (Boost.Asio, one I/O thread) served by rank 0 or
// the launcher, and a blocking client per process. It carries who-is-where (each rank's host:port), the
// communicator's secret, heartbeats and barriers; it never carries tensors.
// Security: every connection must open with the job token (compared in constant time, never logged) within
// the handshake timeout; before it, a connection may send one frame of at most 4 KiB (the hello is under 100
// bytes), so an unauthenticated peer never holds more than that of the server's memory; after it, a frame
// longer than the size limit closes the connection as soon as its length prefix arrives; a frame must arrive whole within the read timeout (slowloris); unauthenticated connections
// are capped (the oldest is dropped for a newer one) and authenticated ones limited; the server binds only
// the address it is given. Every client call has a deadline. Each rejection is logged with the peer address.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "distributed/store_protocol.h"

namespace braid::dist {

// A store call that failed: timed out, lost its connection, was refused, or got an error reply.
class StoreError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

using LogSink = std::function<void(const std::string&)>;
LogSink stderr_log(std::string prefix);  // writes "prefix: line\n" to stderr

struct StoreServerOptions {
  std::string host = "127.0.0.1";  // the only address bound; "0.0.0.0" must be asked for
  int port = 0;                    // 0: an ephemeral port (see StoreServer::port())
  std::string token;               // required, non-empty
  size_t max_message_bytes = kDefaultMaxMessageBytes;  // once authenticated
  size_t max_unauthenticated_bytes = 4096;             // the first frame's limit (the hello is under 100 bytes)
  int max_connections = 1024;               // authenticated connections; more are refused
  int max_unauthenticated = 64;             // connections before their hello; the oldest is dropped
  std::chrono::milliseconds handshake_timeout{5'000};  // from accept to a valid hello
  std::chrono::milliseconds read_timeout{10'000};      // from a frame's first byte to its last; and per reply write
  std::chrono::milliseconds idle_timeout{0};           // authenticated, between frames; 0 = never
  LogSink log;                                          // default: stderr_log("braid store")
};

// Counters for tests and diagnostics (monotonic).
struct StoreServerStats {
  std::atomic<uint64_t> accepted{0}, authenticated{0}, bad_token{0}, bad_frame{0}, too_large{0}, timed_out{0},
      refused_full{0}, evicted{0}, requests{0};
  // The most bytes any connection held in its input buffer before its hello was accepted (a high-water mark:
  // at most max_unauthenticated_bytes + the 4-byte length prefix).
  std::atomic<uint64_t> unauthenticated_buffer_peak{0};
};

class StoreServer {
 public:
  explicit StoreServer(StoreServerOptions options);  // binds and starts serving; throws StoreError
  ~StoreServer();                                     // stops the I/O thread, closes every connection
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  int port() const;
  const std::string& host() const;
  const StoreServerStats& stats() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

struct StoreClientOptions {
  std::chrono::milliseconds connect_timeout{60'000};  // retrying while the server is not up yet
  std::chrono::milliseconds op_timeout{60'000};       // any reply; waits get their own timeout on top
  size_t max_message_bytes = kDefaultMaxMessageBytes;
};

// A blocking client of the store at an IP address (resolve_host() turns names into one). Thread-safe (calls
// are serialised); after a connection error the next call reconnects.
class StoreClient {
 public:
  StoreClient(std::string host, int port, std::string token, StoreClientOptions options = {});
  ~StoreClient();
  StoreClient(const StoreClient&) = delete;
  StoreClient& operator=(const StoreClient&) = delete;

  void set(const std::string& key, const std::string& value);
  std::optional<std::string> get(const std::string& key);
  // Waits for every key to exist; throws StoreError naming the missing keys after `timeout`.
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  // wait({key}, timeout), then get.
  std::string wait_get(const std::string& key, std::chrono::milliseconds timeout);
  // Atomically adds delta to the counter at key (absent = 0) and returns the new value.
  int64_t add(const std::string& key, int64_t delta);
  // Returns once n callers have entered the barrier `name` (reusable); throws StoreError after timeout.
  void barrier(const std::string& name, uint32_t n, std::chrono::milliseconds timeout);
  bool del(const std::string& key);  // true if it existed
  // Milliseconds since key was last written, by the server's clock (so heartbeats ignore clock skew).
  std::optional<uint64_t> age_ms(const std::string& key);
  // The server's steady clock (ns since its epoch) when it handled the request: a reference clock for
  // aligning the ranks' traces (dist/clock_sync.h).
  int64_t server_time_ns();

  const std::string& host() const { return host_; }
  int port() const { return port_; }
  // Another connection to the same store with the same token (for a thread that must not wait behind this one).
  std::unique_ptr<StoreClient> clone(StoreClientOptions options) const;
  // This side's address of the connection: an address of this machine that reaches the server.
  std::string local_address();

 private:
  struct Conn;
  StoreReply call(const StoreRequest& q, std::chrono::milliseconds extra_wait);
  void connect_locked();

  std::string host_;
  int port_;
  std::string token_;
  StoreClientOptions options_;
  std::mutex mu_;
  std::unique_ptr<Conn> conn_;
};

// The job token: $BRAID_JOB_TOKEN, else the contents of the file named by $BRAID_JOB_TOKEN_FILE (which must not
// be readable by group or others), trailing newline removed. Throws UserError when neither gives a token.
std::string load_job_token();
// 32 random bytes from getrandom(2), hex encoded.
std::string generate_token();
// Writes token to a new file `dir`/job_token with mode 0600 (created so; never widened). Returns the path.
std::string write_token_file(const std::string& dir, const std::string& token);

}  // namespace braid::dist
