#pragma once
// Deterministic randomness for the data pipeline, identical on every platform and standard
// library (std::shuffle and the std distributions are not: their algorithms are unspecified).
// Every rank computes the same permutation from (seed, stream), with no communication.

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace zt::data {

// SplitMix64: a small, well-mixed 64-bit generator.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next();
  // Uniform in [0, bound), bound > 0 (Lemire's multiply-shift with rejection, unbiased).
  uint64_t below(uint64_t bound);

 private:
  uint64_t state_;
};

// Seed of an independent stream, e.g. (seed, epoch).
uint64_t mix_seed(uint64_t seed, uint64_t stream);

// Fisher-Yates shuffle of v driven by rng.
template <typename T>
void shuffle(std::vector<T>& v, Rng& rng) {
  for (size_t i = v.size(); i > 1; --i) {
    size_t j = static_cast<size_t>(rng.below(i));
    std::swap(v[i - 1], v[j]);
  }
}

// A permutation of [0, n) determined by (seed, stream).
std::vector<int64_t> permutation(int64_t n, uint64_t seed, uint64_t stream);

}  // namespace zt::data
