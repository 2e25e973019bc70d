#include "data/random.h"

namespace zt::data {

uint64_t Rng::next() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t Rng::below(uint64_t bound) {
  unsigned __int128 m = static_cast<unsigned __int128>(next()) * bound;
  auto low = static_cast<uint64_t>(m);
  if (low < bound) {
    const uint64_t threshold = (0 - bound) % bound;
    while (low < threshold) {
      m = static_cast<unsigned __int128>(next()) * bound;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

uint64_t mix_seed(uint64_t seed, uint64_t stream) {
  Rng a(seed ^ 0x6a09e667f3bcc909ULL);
  Rng b(a.next() ^ stream);
  return b.next();
}

std::vector<int64_t> permutation(int64_t n, uint64_t seed, uint64_t stream) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = i;
  Rng rng(mix_seed(seed, stream));
  shuffle(p, rng);
  return p;
}

}  // namespace zt::data
