#include "tools/trace_analysis.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <yaml-cpp/yaml.h>

#include "base/error.h"

namespace zt::tools {

namespace {

namespace fs = std::filesystem;

// JSON is YAML's flow syntax, so yaml-cpp (already linked for configs) reads the dumps.
template <typename T>
T get(const YAML::Node& n, const char* key, const std::string& origin) {
  ZT_CHECK(n[key], origin, ": not a flight recorder dump (no \"", key, "\")");
  return n[key].as<T>();
}

std::string join_ranks(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ",") + std::to_string(r);
  return s;
}

// What must agree between ranks for one collective.
std::string signature(const TraceEntry& e) {
  std::string s = e.op + " " + std::to_string(e.bytes) + " B";
  if (!e.dtype.empty()) s += " " + e.dtype;
  if (!e.detail.empty()) s += " " + e.detail;
  return s;
}

struct GroupView {
  std::string name;
  std::vector<int> ranks;                                        // world ranks of the members
  std::map<int, std::map<uint64_t, const TraceEntry*>> by_rank;  // rank -> seq -> entry
};

std::map<std::string, GroupView> group_views(const std::vector<RankDump>& dumps) {
  std::map<std::string, GroupView> views;
  for (const RankDump& d : dumps) {
    std::map<int, const TraceGroup*> ids;
    for (const TraceGroup& g : d.groups) {
      ids[g.id] = &g;
      GroupView& v = views[g.name];
      v.name = g.name;
      if (v.ranks.empty()) v.ranks = g.ranks;
      v.by_rank[d.rank];  // a member with no entries still counts as present
    }
    for (const TraceEntry& e : d.entries) {
      auto it = ids.find(e.group);
      if (it == ids.end()) continue;
      views[it->second->name].by_rank[d.rank][e.seq] = &e;
    }
  }
  return views;
}

std::string ms(int64_t us) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f ms", static_cast<double>(us) / 1000.0);
  return buf;
}

}  // namespace

RankDump parse_dump(const std::string& json, const std::string& origin) {
  YAML::Node root;
  try {
    root = YAML::Load(json);
  } catch (const YAML::Exception& e) {
    ZT_THROW(origin, ": not valid JSON: ", e.what());
  }
  ZT_CHECK(root.IsMap(), origin, ": not a flight recorder dump");
  RankDump d;
  d.rank = get<int>(root, "rank", origin);
  d.world_size = get<int>(root, "world_size", origin);
  d.reason = root["reason"] ? root["reason"].as<std::string>() : "";
  d.recorded = root["recorded"] ? root["recorded"].as<uint64_t>() : 0;
  d.capacity = root["capacity"] ? root["capacity"].as<uint64_t>() : 0;
  for (const YAML::Node& g : get<YAML::Node>(root, "groups", origin)) {
    TraceGroup t;
    t.id = get<int>(g, "id", origin);
    t.name = get<std::string>(g, "name", origin);
    t.ranks = get<std::vector<int>>(g, "ranks", origin);
    d.groups.push_back(std::move(t));
  }
  for (const YAML::Node& n : get<YAML::Node>(root, "entries", origin)) {
    TraceEntry e;
    e.seq = get<uint64_t>(n, "seq", origin);
    e.group = get<int>(n, "group", origin);
    e.op = get<std::string>(n, "op", origin);
    e.dtype = n["dtype"] ? n["dtype"].as<std::string>() : "";
    e.detail = n["detail"] ? n["detail"].as<std::string>() : "";
    e.state = get<std::string>(n, "state", origin);
    e.numel = n["numel"] ? n["numel"].as<int64_t>() : 0;
    e.bytes = get<int64_t>(n, "bytes", origin);
    e.enqueue_us = n["enqueue_us"] ? n["enqueue_us"].as<int64_t>() : 0;
    e.start_us = n["start_us"] ? n["start_us"].as<int64_t>() : 0;
    e.end_us = n["end_us"] ? n["end_us"].as<int64_t>() : 0;
    d.entries.push_back(std::move(e));
  }
  return d;
}

std::vector<RankDump> read_dumps(const std::string& dir) {
  ZT_CHECK(fs::is_directory(dir), "zt-trace: ", dir, " is not a directory");
  const std::regex name("flight_r([0-9]+)\\.json");
  std::vector<RankDump> dumps;
  for (const auto& f : fs::directory_iterator(dir)) {
    if (!std::regex_match(f.path().filename().string(), name)) continue;
    std::ifstream in(f.path());
    std::stringstream text;
    text << in.rdbuf();
    dumps.push_back(parse_dump(text.str(), f.path().string()));
  }
  ZT_CHECK(!dumps.empty(), "zt-trace: no flight_r<rank>.json in ", dir,
           " (the dumps are written to ZT_FLIGHT_DIR, default ./zt_flight)");
  std::sort(dumps.begin(), dumps.end(),
            [](const RankDump& a, const RankDump& b) { return a.rank < b.rank; });
  return dumps;
}

TraceReport analyze(const std::vector<RankDump>& dumps) {
  TraceReport report;
  std::string divergence, never_entered, slowest;
  std::set<int> dumped;
  for (const RankDump& d : dumps) dumped.insert(d.rank);
  const int world = dumps.empty() ? 0 : dumps.front().world_size;
  std::vector<int> missing;
  for (int r = 0; r < world; ++r) {
    if (dumped.count(r) == 0) missing.push_back(r);
  }
  if (!missing.empty()) {
    report.findings.push_back("no dump from rank(s) " + join_ranks(missing) +
                              " (killed before dumping, or recorder off there)");
  }
  std::ostringstream table;
  for (const auto& [gname, view] : group_views(dumps)) {
    // The window every dumped member still holds.
    uint64_t first = 1, last_any = 0;
    std::map<int, uint64_t> last_seq;
    for (const auto& [rank, entries] : view.by_rank) {
      last_seq[rank] = entries.empty() ? 0 : entries.rbegin()->first;
      if (!entries.empty()) first = std::max(first, entries.begin()->first);
      last_any = std::max(last_any, last_seq[rank]);
    }
    table << gname << ": #seq op bytes | per rank: state, arrival after the first, duration"
          << " | last to arrive\n";
    std::map<int, int> last_arrivals;
    int64_t total_lag = 0;
    int compared = 0;
    for (uint64_t s = first; s <= last_any; ++s) {
      std::map<std::string, std::vector<int>> sigs;
      std::vector<int> absent, waiting;
      const TraceEntry* any = nullptr;
      int64_t lo = INT64_MAX, hi = INT64_MIN;
      int latest = -1;
      for (const auto& [rank, entries] : view.by_rank) {
        auto it = entries.find(s);
        if (it == entries.end()) {
          absent.push_back(rank);
          continue;
        }
        const TraceEntry& e = *it->second;
        any = &e;
        sigs[signature(e)].push_back(rank);
        if (!e.finished()) waiting.push_back(rank);
        lo = std::min(lo, e.enqueue_us);
        if (e.enqueue_us > hi) {
          hi = e.enqueue_us;
          latest = rank;
        }
      }
      if (any == nullptr) continue;
      const std::string where = gname + " collective #" + std::to_string(s);
      if (sigs.size() > 1 && divergence.empty()) {
        // The majority's call is the expected one; with a tie every variant is named.
        size_t most = 0;
        for (const auto& [sig, ranks] : sigs) most = std::max(most, ranks.size());
        size_t at_most = 0;
        for (const auto& [sig, ranks] : sigs) at_most += ranks.size() == most;
        std::string odd, expected;
        for (const auto& [sig, ranks] : sigs) {
          const std::string part = "rank" + std::string(ranks.size() > 1 ? "s " : " ") +
                                   join_ranks(ranks) + " called " + sig;
          if (ranks.size() == most && at_most == 1) {
            expected = part;
          } else {
            odd += (odd.empty() ? "" : "; ") + part;
          }
        }
        divergence = where + " diverged: " + odd + (expected.empty() ? "" : " where " + expected) +
                     " (every rank must issue the same collectives in the same order: a module "
                     "called a different number of times on some ranks?)";
      }
      if (!absent.empty() && !waiting.empty() && never_entered.empty()) {
        never_entered = "rank" + std::string(absent.size() > 1 ? "s " : " ") + join_ranks(absent) +
                        " never entered " + where + " (" + any->op + " " +
                        std::to_string(any->bytes) + " B) that rank" +
                        (waiting.size() > 1 ? "s " : " ") + join_ranks(waiting) + " waited in (" +
                        any->state + ")";
      }
      if (absent.empty() && view.by_rank.size() > 1) {
        ++compared;
        ++last_arrivals[latest];
        total_lag += hi - lo;
      }
      table << "  #" << s << " " << any->op << " " << any->bytes;
      for (const auto& [rank, entries] : view.by_rank) {
        auto it = entries.find(s);
        table << " | r" << rank << ": ";
        if (it == entries.end()) {
          table << "-";
          continue;
        }
        const TraceEntry& e = *it->second;
        table << e.state << " +" << ms(e.enqueue_us - lo);
        if (e.end_us > 0) table << " " << ms(e.end_us - e.enqueue_us);
      }
      table << (absent.empty() ? " | rank " + std::to_string(latest) : std::string(" | -")) << "\n";
    }
    if (compared > 0 && slowest.empty()) {
      auto top = std::max_element(last_arrivals.begin(), last_arrivals.end(),
                                  [](const auto& a, const auto& b) { return a.second < b.second; });
      slowest = gname + ": rank " + std::to_string(top->first) + " arrived last at " +
                std::to_string(top->second) + " of " + std::to_string(compared) +
                " collectives (mean spread of arrivals " + ms(total_lag / compared) + ")";
    }
  }
  for (const std::string* f : {&divergence, &never_entered, &slowest}) {
    if (!f->empty()) report.findings.push_back(*f);
  }
  if (!divergence.empty()) {
    report.verdict = divergence;
  } else if (!never_entered.empty()) {
    report.verdict = never_entered;
  } else {
    report.verdict = "no divergence: every rank recorded the same collectives" +
                     (slowest.empty() ? std::string() : "; " + slowest);
  }
  report.table = table.str();
  return report;
}

}  // namespace zt::tools
