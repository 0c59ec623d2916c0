// Shared-memory rings (see shm_ring.h). Segment layout: a 4 KiB header page (magic, capacity, what the consumer
// needs to read the producer's memory and the producer's cancellations; then, on their own cache line, the
// consumer's tail and acknowledgements, the futex word and the sleeping-producer flag), then `capacity` bytes
// of ring. Offsets grow without wrapping (u64); position = offset % capacity.
// Wake-up protocol (no lost wake-ups): the producer reads seq, sets waiting, re-checks its condition (space,
// or an acknowledgement), then sleeps on seq == the value read; the consumer stores tail (or acked),
// increments seq, then wakes if waiting is set. All are sequentially consistent, so either the producer sees
// the consumer's progress or the consumer sees waiting.
#include "distributed/shm_ring.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <ctime>
#include <fstream>

#include "core/error.h"

#ifndef SYS_futex_waitv
#define SYS_futex_waitv 449  // the same number on x86_64 and aarch64 (Linux 5.16)
#endif

namespace braid::dist::detail {

namespace {

constexpr uint64_t kMagic = 0x474e495244494152ull;  // "RAIDRING"
constexpr size_t kHeaderBytes = 4096;

std::string first_line(const char* path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

long futex(std::atomic<uint32_t>* word, int op, uint32_t val, const timespec* timeout) {
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, val, timeout, nullptr, 0);
}

// The word a consumer reads from this process to learn whether it may read its memory.
uint64_t probe_word() {
  static const uint64_t v = [] {
    uint64_t x = 0;
    if (::getrandom(&x, sizeof x, 0) != sizeof x) x = 0x5eed5eed5eed5eedull ^ static_cast<uint64_t>(::getpid());
    return x | 1;
  }();
  return v;
}
const uint64_t* probe_address() {
  static const uint64_t word = probe_word();
  return &word;
}

}  // namespace

struct ShmRing::Header {
  uint64_t magic;
  uint64_t capacity;
  std::atomic<int32_t> producer_pid;      // set by the producer when it maps the segment
  std::atomic<uint64_t> probe_addr;       // an address in the producer's memory holding probe_value
  std::atomic<uint64_t> probe_value;
  std::atomic<uint64_t> cancelled;        // direct frames up to this number were given up by the producer
  alignas(64) std::atomic<uint64_t> tail;  // written by the consumer
  std::atomic<uint64_t> acked;             // direct frames the consumer has copied
  std::atomic<uint32_t> seq;               // futex word: bumped by the consumer after every take or ack
  std::atomic<uint32_t> waiting;           // 1 while the producer may sleep on seq
};
static_assert(sizeof(std::atomic<uint64_t>) == 8 && std::atomic<uint64_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<uint32_t>) == 4 && std::atomic<uint32_t>::is_always_lock_free);

std::string same_host_key() {
  const std::string boot = first_line("/proc/sys/kernel/random/boot_id");
  char host[256] = {};
  if (boot.empty() || ::gethostname(host, sizeof host - 1) != 0) return {};
  char ns[128] = {};
  if (::readlink("/proc/self/ns/net", ns, sizeof ns - 1) <= 0) return {};
  return BRAID_STR(boot, "/", host, "/", ns);
}

std::unique_ptr<ShmRing> ShmRing::map(int fd, uint64_t capacity, bool init, std::string& err) {
  const size_t bytes = kHeaderBytes + capacity;
  // MAP_POPULATE: fault every page in now, not during the first transfers.
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) {
    err = BRAID_STR("mmap: ", std::strerror(errno));
    return nullptr;
  }
  std::unique_ptr<ShmRing> r(new ShmRing);
  r->base_ = p;
  r->map_bytes_ = bytes;
  r->h_ = static_cast<Header*>(p);
  r->data_ = static_cast<std::byte*>(p) + kHeaderBytes;
  r->cap_ = capacity;
  if (init) {
    new (r->h_) Header{};
    r->h_->magic = kMagic;
    r->h_->capacity = capacity;
  } else if (r->h_->magic != kMagic || r->h_->capacity != capacity) {
    err = "not a braid ring (bad magic or size)";
    return nullptr;
  } else {
    r->h_->probe_addr = reinterpret_cast<uint64_t>(probe_address());
    r->h_->probe_value = probe_word();
    r->h_->producer_pid = static_cast<int32_t>(::getpid());
  }
  return r;
}

std::unique_ptr<ShmRing> ShmRing::create(uint64_t capacity, std::string& name, std::string& err) {
  uint64_t rnd[2] = {};
  if (::getrandom(rnd, sizeof rnd, 0) != sizeof rnd) {
    err = BRAID_STR("getrandom: ", std::strerror(errno));
    return nullptr;
  }
  char buf[96];
  std::snprintf(buf, sizeof buf, "/braid-%d-%016llx%016llx", static_cast<int>(::getpid()),
                static_cast<unsigned long long>(rnd[0]), static_cast<unsigned long long>(rnd[1]));
  name = buf;
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    err = BRAID_STR("shm_open ", name, ": ", std::strerror(errno));
    return nullptr;
  }
  const off_t bytes = static_cast<off_t>(kHeaderBytes + capacity);
  // fallocate, not only ftruncate: a /dev/shm without room for the pages fails here instead of raising
  // SIGBUS at the first write into a page that cannot be allocated.
  std::unique_ptr<ShmRing> r;
  if (::ftruncate(fd, bytes) != 0)
    err = BRAID_STR("ftruncate ", name, ": ", std::strerror(errno));
  else if (int e = ::posix_fallocate(fd, 0, bytes); e != 0)
    err = BRAID_STR("fallocate ", name, " (", bytes, " bytes): ", std::strerror(e));
  else
    r = map(fd, capacity, true, err);
  ::close(fd);
  if (!r) unlink(name);
  return r;
}

std::unique_ptr<ShmRing> ShmRing::open(const std::string& name, std::string& err) {
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) {
    err = BRAID_STR("shm_open ", name, ": ", std::strerror(errno));
    return nullptr;
  }
  struct stat st {};
  std::unique_ptr<ShmRing> r;
  if (::fstat(fd, &st) != 0 || st.st_size <= static_cast<off_t>(kHeaderBytes))
    err = BRAID_STR("shm segment ", name, " has no ring");
  else
    r = map(fd, static_cast<uint64_t>(st.st_size) - kHeaderBytes, false, err);
  ::close(fd);
  return r;
}

void ShmRing::unlink(const std::string& name) { ::shm_unlink(name.c_str()); }

ShmRing::~ShmRing() {
  if (base_) ::munmap(base_, map_bytes_);
}

uint64_t ShmRing::space() const {
  const uint64_t used = head_ - h_->tail.load(std::memory_order_acquire);
  return used >= cap_ ? 0 : cap_ - used;
}

void ShmRing::put(const std::byte* src, uint64_t n) {
  const uint64_t at = head_ % cap_, first = std::min(n, cap_ - at);
  std::memcpy(data_ + at, src, first);
  if (first < n) std::memcpy(data_, src + first, n - first);
  head_ += n;  // published by the notice on the socket (its send orders these stores before it)
}

uint64_t ShmRing::rewind(uint64_t min_at) {
  const uint64_t at = head_ % cap_;
  if (at == 0 || at < min_at || h_->tail.load(std::memory_order_acquire) != head_) return 0;
  head_ += cap_ - at;
  return cap_ - at;
}

void ShmRing::take(std::byte* dst, uint64_t n, uint64_t skip) {
  tail_ += skip;
  const uint64_t at = tail_ % cap_, first = std::min(n, cap_ - at);
  if (dst) {
    std::memcpy(dst, data_ + at, first);
    if (first < n) std::memcpy(dst + first, data_, n - first);
  }
  tail_ += n;
  h_->tail.store(tail_, std::memory_order_seq_cst);
  wake();
}

void ShmRing::wake() {
  h_->seq.fetch_add(1, std::memory_order_seq_cst);
  if (h_->waiting.load(std::memory_order_seq_cst)) {
    h_->waiting.store(0, std::memory_order_relaxed);
    futex(&h_->seq, FUTEX_WAKE, INT_MAX, nullptr);  // shared (not FUTEX_PRIVATE): across processes
  }
}

bool ShmRing::acked(uint64_t k) const { return h_->acked.load(std::memory_order_seq_cst) >= k; }
void ShmRing::cancel(uint64_t k) {
  uint64_t c = h_->cancelled.load(std::memory_order_seq_cst);
  while (c < k && !h_->cancelled.compare_exchange_weak(c, k, std::memory_order_seq_cst)) {
  }
}
bool ShmRing::cancelled(uint64_t k) const { return h_->cancelled.load(std::memory_order_seq_cst) >= k; }
void ShmRing::ack_direct() {
  h_->acked.fetch_add(1, std::memory_order_seq_cst);
  wake();
}

bool ShmRing::probe_producer() {
  uint64_t got = 0;
  iovec local{&got, sizeof got};
  iovec remote{reinterpret_cast<void*>(h_->probe_addr.load()), sizeof got};
  const pid_t pid = h_->producer_pid.load();
  return pid > 0 && ::process_vm_readv(pid, &local, 1, &remote, 1, 0) == sizeof got &&
         got == h_->probe_value.load() && got != 0;
}

bool ShmRing::read_direct(std::byte* dst, uint64_t addr, uint64_t n) {
  const pid_t pid = h_->producer_pid.load(std::memory_order_relaxed);
  while (n > 0) {
    iovec local{dst, n};
    iovec remote{reinterpret_cast<void*>(addr), n};
    const ssize_t r = ::process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (r <= 0) {
      if (r == 0) errno = EFAULT;
      return false;
    }
    dst += r;
    addr += static_cast<uint64_t>(r);
    n -= static_cast<uint64_t>(r);
  }
  return true;
}

bool ShmRing::arm(const std::vector<ShmRing*>& rings) {
  for (ShmRing* r : rings) {
    r->armed_seq_ = r->h_->seq.load(std::memory_order_seq_cst);
    r->h_->waiting.store(1, std::memory_order_seq_cst);
  }
  return !rings.empty();
}

void ShmRing::disarm(const std::vector<ShmRing*>& rings) {
  for (ShmRing* r : rings) r->h_->waiting.store(0, std::memory_order_relaxed);
}

void ShmRing::sleep(const std::vector<ShmRing*>& rings, std::chrono::microseconds max) {
  std::vector<futex_waitv> w(std::min<size_t>(rings.size(), FUTEX_WAITV_MAX));  // the rest: at the next turn
  for (size_t i = 0; i < w.size(); ++i) {
    w[i] = {};
    w[i].val = rings[i]->armed_seq_;
    w[i].uaddr = reinterpret_cast<uint64_t>(&rings[i]->h_->seq);
    w[i].flags = FUTEX_32;  // shared: no FUTEX_PRIVATE_FLAG
  }
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  const auto ns = static_cast<long long>(ts.tv_nsec) + std::chrono::nanoseconds(max).count();
  ts.tv_sec += static_cast<time_t>(ns / 1'000'000'000);
  ts.tv_nsec = static_cast<long>(ns % 1'000'000'000);
  if (::syscall(SYS_futex_waitv, w.data(), static_cast<unsigned>(w.size()), 0u, &ts, CLOCK_MONOTONIC) < 0 &&
      errno == ENOSYS) {
    // A kernel before 5.16: sleep on the first ring only, briefly (the caller re-checks all of them).
    const timespec rel{0, std::min<long>(1'000'000, static_cast<long>(std::chrono::nanoseconds(max).count()))};
    futex(&rings[0]->h_->seq, FUTEX_WAIT, static_cast<uint32_t>(w[0].val), &rel);
  }
}

}  // namespace braid::dist::detail
