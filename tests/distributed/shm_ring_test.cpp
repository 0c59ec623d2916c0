// The TCP backend's shared-memory ring on its own, in one process (tcp_comm_test.cpp runs it between
// processes): bytes come out as they went in across wraps, rewinds and chunks of every size; a sleeping
// producer is woken by the consumer; direct frames are acknowledged, cancelled and read from this process's
// own memory; the segment's name is gone from /dev/shm once both ends have it; bad names fail cleanly.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <random>
#include <thread>

#include "distributed/shm_ring.h"

using namespace braid::dist::detail;
using namespace std::chrono_literals;

namespace {

struct Pair {
  std::unique_ptr<ShmRing> consumer, producer;
  std::string name;
  explicit Pair(uint64_t capacity) {
    std::string err;
    consumer = ShmRing::create(capacity, name, err);
    EXPECT_TRUE(consumer) << err;
    producer = ShmRing::open(name, err);
    EXPECT_TRUE(producer) << err;
    ShmRing::unlink(name);
  }
};

TEST(TcpShmRing, BytesComeOutInOrderAcrossWrapsAndRewinds) {
  Pair p(100'003);  // odd, so that wraps fall mid-chunk
  ASSERT_TRUE(p.consumer && p.producer);
  EXPECT_EQ(p.producer->capacity(), 100'003u);
  std::mt19937 rng(3);
  std::vector<std::byte> in(3'000'000), out(in.size());
  for (auto& b : in) b = static_cast<std::byte>(rng());
  size_t put = 0, got = 0, rewinds = 0;
  while (got < in.size()) {
    // Producer: a chunk of random size if there is room, sometimes rewinding an empty ring.
    if (put < in.size() && p.producer->space() > 0) {
      const uint64_t skip = p.producer->rewind(rng() % 2 ? 1 : 200'000);
      rewinds += skip > 0;
      const uint64_t c = std::min<uint64_t>({p.producer->space(), in.size() - put, 1 + rng() % 70'000});
      p.producer->put(in.data() + put, c);
      // Consumer: takes it (a real receiver learns skip and c over the socket).
      p.consumer->take(out.data() + got, c, skip);
      put += c;
      got += c;
    }
  }
  EXPECT_EQ(in, out);
  EXPECT_GT(rewinds, 10u);
}

TEST(TcpShmRing, AFullRingWaitsUntilTheConsumerTakes) {
  Pair p(4096);
  ASSERT_TRUE(p.consumer && p.producer);
  std::vector<std::byte> a(4096, std::byte{7}), b(4096);
  p.producer->put(a.data(), 4096);
  EXPECT_EQ(p.producer->space(), 0u);
  // Functional only (no wall-clock bound: a descheduled thread on a loaded machine made one fail): the
  // producer found the ring full, waited at least once, and was woken with the consumer's 1000 bytes free.
  std::atomic<bool> taken{false};
  std::thread consumer([&] {
    std::this_thread::sleep_for(50ms);
    p.consumer->take(b.data(), 1000);
    taken.store(true);
  });
  ShmRing* r = p.producer.get();
  int waits = 0;
  while (r->space() == 0) {
    ++waits;
    ShmRing::wait({r}, [&] { return r->space() > 0; }, 10'000us);
  }
  consumer.join();
  EXPECT_GE(waits, 1);
  EXPECT_TRUE(taken.load());
  EXPECT_EQ(p.producer->space(), 1000u);
  EXPECT_EQ(b[999], std::byte{7});
}

TEST(TcpShmRing, DirectFramesAreAcknowledgedOrCancelled) {
  Pair p(4096);
  ASSERT_TRUE(p.consumer && p.producer);
  ASSERT_TRUE(p.consumer->probe_producer()) << "a process may always read its own memory";
  std::vector<std::byte> src(3 << 20), dst(src.size());
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::byte>(i * 31 + 7);
  const uint64_t k1 = p.producer->next_direct();
  EXPECT_FALSE(p.producer->acked(k1));
  EXPECT_EQ(p.consumer->take_direct(), k1);
  ASSERT_TRUE(p.consumer->read_direct(dst.data(), reinterpret_cast<uint64_t>(src.data()), src.size()));
  EXPECT_FALSE(p.consumer->cancelled(k1));
  p.consumer->ack_direct();
  EXPECT_TRUE(p.producer->acked(k1));
  EXPECT_EQ(src, dst);
  const uint64_t k2 = p.producer->next_direct();
  p.producer->cancel(k2);
  EXPECT_EQ(p.consumer->take_direct(), k2);
  EXPECT_TRUE(p.consumer->cancelled(k2));
  EXPECT_FALSE(p.producer->acked(k2));
  EXPECT_FALSE(p.consumer->read_direct(dst.data(), 8, 16));  // an address that is not mapped
}

TEST(TcpShmRing, NothingIsLeftInDevShmAndBadNamesFail) {
  std::string name, err;
  {
    Pair p(8192);
    name = p.name;
    EXPECT_FALSE(std::filesystem::exists("/dev/shm" + name));
  }
  EXPECT_EQ(name.rfind("/braid-" + std::to_string(::getpid()) + "-", 0), 0u) << name;
  EXPECT_FALSE(ShmRing::open(name, err));  // unlinked
  EXPECT_NE(err.find("shm_open"), std::string::npos) << err;
  EXPECT_FALSE(ShmRing::open("/braid-no-such-ring", err));
  EXPECT_FALSE(same_host_key().empty());
}

}  // namespace
