#include "parallel/slurm_lists.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "base/error.h"

namespace zt::dist {
namespace {

// Top-level comma-separated items (commas inside brackets belong to a range list).
std::vector<std::string> split_top_level(const std::string& s, const char* name) {
  std::vector<std::string> items;
  std::string cur;
  int depth = 0;
  for (char c : s) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    ZT_CHECK(depth == 0 || depth == 1, "environment variable ", name, "='", s,
             "' has unbalanced or nested brackets");
    if (c == ',' && depth == 0) {
      items.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  ZT_CHECK(depth == 0, "environment variable ", name, "='", s, "' has an unclosed '['");
  items.push_back(cur);
  return items;
}

// A whole non-negative decimal number.
long whole_number(const std::string& s, const std::string& all, const char* name) {
  ZT_CHECK(!s.empty() && s.size() <= 9 &&
               std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); }),
           "environment variable ", name, "='", all, "': '", s, "' is not a number");
  return std::strtol(s.c_str(), nullptr, 10);
}

void expand_into(const std::string& item, const std::string& all, const char* name,
                 std::vector<std::string>& out) {
  const size_t open = item.find('[');
  if (open == std::string::npos) {
    ZT_CHECK(!item.empty() && item.find(']') == std::string::npos, "environment variable ", name,
             "='", all, "' has an empty or malformed host name");
    out.push_back(item);
    return;
  }
  const size_t close = item.find(']', open);
  const std::string prefix = item.substr(0, open);
  const std::string rest = item.substr(close + 1);
  for (const std::string& range : split_top_level(item.substr(open + 1, close - open - 1), name)) {
    const size_t dash = range.find('-');
    const std::string lo_s = range.substr(0, dash);
    const std::string hi_s = dash == std::string::npos ? lo_s : range.substr(dash + 1);
    const long lo = whole_number(lo_s, all, name), hi = whole_number(hi_s, all, name);
    ZT_CHECK(lo <= hi, "environment variable ", name, "='", all, "': range ", range,
             " runs backwards");
    for (long i = lo; i <= hi; ++i) {
      std::string n = std::to_string(i);
      if (n.size() < lo_s.size()) n.insert(0, lo_s.size() - n.size(), '0');  // node[01-02]
      expand_into(prefix + n + rest, all, name, out);
    }
  }
}

}  // namespace

std::vector<int> parse_slurm_tasks_per_node(const std::string& value, const char* name) {
  std::vector<int> counts;
  for (const std::string& item : split_top_level(value, name)) {
    const size_t paren = item.find('(');
    const long count = whole_number(item.substr(0, paren), value, name);
    long repeat = 1;
    if (paren != std::string::npos) {
      ZT_CHECK(item.size() > paren + 3 && item.compare(paren, 2, "(x") == 0 && item.back() == ')',
               "environment variable ", name, "='", value, "': '", item,
               "' is not of the form count(xrepeat)");
      repeat = whole_number(item.substr(paren + 2, item.size() - paren - 3), value, name);
    }
    ZT_CHECK(count >= 1 && repeat >= 1, "environment variable ", name, "='", value,
             "': counts and repeats must be >= 1");
    counts.insert(counts.end(), static_cast<size_t>(repeat), static_cast<int>(count));
  }
  return counts;
}

std::vector<std::string> expand_slurm_hostlist(const std::string& value, const char* name) {
  std::vector<std::string> hosts;
  for (const std::string& item : split_top_level(value, name))
    expand_into(item, value, name, hosts);
  return hosts;
}

}  // namespace zt::dist
