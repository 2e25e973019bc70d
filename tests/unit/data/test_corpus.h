#pragma once
// Synthetic English-like sentences for tests: deterministic, no corpus package needed.

#include <string>
#include <vector>

#include "data/random.h"

namespace zt::data::testing {

inline std::vector<std::string> synthetic_sentences(int n, uint64_t seed = 1) {
  static const char* kWords[] = {"the",    "lord",        "said",   "unto",   "moses",    "and",
                                 "people", "of",          "israel", "went",   "into",     "land",
                                 "which",  "he",          "had",    "given",  "them",     "for",
                                 "an",     "inheritance", "behold", "light",  "darkness", "was",
                                 "upon",   "face",        "deep",   "spirit", "waters",   "day"};
  constexpr int kNumWords = sizeof(kWords) / sizeof(kWords[0]);
  Rng rng(seed);
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) {
    const int len = 3 + static_cast<int>(rng.below(i % 10 == 0 ? 60 : 15));
    std::string s;
    for (int k = 0; k < len; ++k) {
      if (k) s += ' ';
      s += kWords[rng.below(kNumWords)];
    }
    s += '.';
    out.push_back(s);
  }
  return out;
}

}  // namespace zt::data::testing
