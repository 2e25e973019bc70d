#include "launcher/hostfile.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "base/error.h"

namespace zt::launcher {

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

namespace {

// Parses a non-negative decimal integer; false on anything else (signs, spaces, overflow).
bool parse_count(const std::string& s, int* out) {
  if (s.empty() || s.size() > 9) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  *out = std::stoi(s);
  return true;
}

// One `NAME[:SLOT[,SLOT...]]` of a filter: the host and its slots (empty = the whole host).
using FilterSpec = std::map<std::string, std::set<int>>;

FilterSpec parse_filter(const std::string& text, const char* flag,
                        const std::vector<HostSlots>& hosts) {
  FilterSpec spec;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, '@')) {
    ZT_CHECK(!item.empty(), flag, " '", text, "' has an empty host entry");
    const size_t colon = item.find(':');
    const std::string host = item.substr(0, colon);
    auto it = std::find_if(hosts.begin(), hosts.end(),
                           [&](const HostSlots& h) { return h.host == host; });
    ZT_CHECK(it != hosts.end(), flag, " names host '", host, "', which is not in the hostfile");
    ZT_CHECK(!spec.count(host), flag, " names host '", host, "' twice");
    std::set<int>& slots = spec[host];
    if (colon == std::string::npos) continue;
    std::stringstream slot_ss(item.substr(colon + 1));
    std::string slot_text;
    while (std::getline(slot_ss, slot_text, ',')) {
      int slot = 0;
      ZT_CHECK(parse_count(slot_text, &slot), flag, " has a bad slot '", slot_text, "' for host '",
               host, "'");
      ZT_CHECK(slot < it->slots, flag, " slot ", slot, " of host '", host, "' is past its ",
               it->slots, " slots");
      slots.insert(slot);
    }
    ZT_CHECK(!slots.empty(), flag, " '", item, "' lists no slots after ':'");
  }
  ZT_CHECK(!spec.empty(), flag, " is empty");
  return spec;
}

}  // namespace

std::vector<HostSlots> parse_hostfile(const std::string& text, const std::string& source) {
  std::vector<HostSlots> hosts;
  std::set<std::string> seen;
  std::stringstream ss(text);
  std::string raw;
  int line_no = 0;
  while (std::getline(ss, raw, '\n')) {
    ++line_no;
    std::string line = raw.substr(0, raw.find('#'));
    line = trim(line);
    if (line.empty()) continue;
    std::stringstream fields(line);
    std::string host, slots_field, extra;
    fields >> host >> slots_field >> extra;
    int slots = 0;
    const bool ok = extra.empty() && slots_field.rfind("slots=", 0) == 0 &&
                    parse_count(slots_field.substr(6), &slots) && slots >= 1;
    ZT_CHECK(ok, source, ":", line_no, ": expected 'HOSTNAME slots=N' with N >= 1, got '",
             trim(raw), "'");
    ZT_CHECK(seen.insert(host).second, source, ":", line_no, ": host '", host, "' is listed twice");
    hosts.push_back({host, slots});
  }
  ZT_CHECK(!hosts.empty(), source, ": the hostfile lists no hosts");
  return hosts;
}

std::vector<HostSlots> read_hostfile(const std::string& path) {
  std::ifstream in(path);
  ZT_CHECK(in.good(), "cannot read --hostfile ", path);
  std::stringstream buf;
  buf << in.rdbuf();
  return parse_hostfile(buf.str(), path);
}

std::vector<NodeAssignment> filter_hosts(const std::vector<HostSlots>& hosts,
                                         const std::string& include, const std::string& exclude) {
  ZT_CHECK(include.empty() || exclude.empty(), "--include and --exclude are mutually exclusive");
  FilterSpec inc, exc;
  if (!include.empty()) inc = parse_filter(include, "--include", hosts);
  if (!exclude.empty()) exc = parse_filter(exclude, "--exclude", hosts);
  std::vector<NodeAssignment> nodes;
  for (const HostSlots& h : hosts) {
    NodeAssignment node{h.host, {}};
    for (int s = 0; s < h.slots; ++s) {
      bool keep = true;
      if (!include.empty()) {
        auto it = inc.find(h.host);
        keep = it != inc.end() && (it->second.empty() || it->second.count(s));
      } else if (!exclude.empty()) {
        auto it = exc.find(h.host);
        keep = !(it != exc.end() && (it->second.empty() || it->second.count(s)));
      }
      if (keep) node.slots.push_back(s);
    }
    if (!node.slots.empty()) nodes.push_back(std::move(node));
  }
  ZT_CHECK(!nodes.empty(), "--include/--exclude leave no host to run on");
  return nodes;
}

}  // namespace zt::launcher
