// Did-you-mean for unknown keys and names: optimal-string-alignment distance (Levenshtein plus
// adjacent transpositions, so "stgae" is one edit from "stage").
#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "core/config/passes.h"

namespace zt::config_detail {

std::string lower(const std::string& s) {
  std::string out = s;
  for (char& ch : out) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return out;
}

namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1));
  for (size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[n][m];
}

}  // namespace

std::string closest_name(const std::string& word, const std::vector<std::string>& candidates) {
  const std::string w = lower(word);
  std::string best;
  size_t best_distance = std::string::npos;
  for (const auto& c : candidates) {
    size_t dist = edit_distance(w, lower(c));
    if (dist < best_distance) {
      best_distance = dist;
      best = c;
    }
  }
  // A third of the word may be wrong (at least 2 edits), so short keys still get suggestions
  // and unrelated long ones do not.
  size_t allowed = std::max<size_t>(2, w.size() / 3);
  return best_distance <= allowed ? best : std::string();
}

}  // namespace zt::config_detail
