// Counter-based random numbers: every draw is a pure function of (seed, stream, counter), so a stream's
// whole state is two integers (checkpointable) and a dropout mask depends only on the global element index
// (identical under any split of the tensor across devices).
#pragma once
#include <cmath>
#include <cstdint>

namespace braid {

inline uint64_t mix64(uint64_t z) {  // splitmix64 finaliser
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

inline uint64_t hash_key(uint64_t a, uint64_t b) { return mix64(a ^ mix64(b + 0x632be59bd9b4e019ULL)); }

// Uniform in [0, 1) with 53 random bits, from a key and an element index.
inline double uniform_at(uint64_t key, uint64_t index) {
  return static_cast<double>(mix64(key ^ mix64(index)) >> 11) * (1.0 / 9007199254740992.0);
}

// uniform_at(key, index) >= p without the conversion to double: the 53-bit integer u of uniform_at is at least
// p 2^53 exactly when u >= keep_threshold(p) = ceil(p 2^53) (both exact in double), so the two agree bit for bit.
inline uint64_t keep_threshold(double p) { return static_cast<uint64_t>(std::ceil(p * 9007199254740992.0)); }
inline bool kept_at(uint64_t key, uint64_t index, uint64_t threshold) {
  return (mix64(key ^ mix64(index)) >> 11) >= threshold;
}

class Rng {
 public:
  Rng() = default;
  Rng(uint64_t seed, uint64_t stream) : key_(hash_key(seed, stream)) {}
  uint64_t next_u64() { return mix64(key_ ^ mix64(counter_++)); }
  double uniform() { return static_cast<double>(next_u64() >> 11) * (1.0 / 9007199254740992.0); }
  double uniform(double a, double b) { return a + (b - a) * uniform(); }
  double normal(double mean = 0, double std = 1) {  // Box-Muller, one value per two draws
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return mean + std * std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  uint64_t below(uint64_t n) { return next_u64() % n; }
  uint64_t key() const { return key_; }
  uint64_t counter() const { return counter_; }
  void restore(uint64_t key, uint64_t counter) {
    key_ = key;
    counter_ = counter;
  }

 private:
  uint64_t key_ = 0;
  uint64_t counter_ = 0;
};

}  // namespace braid
