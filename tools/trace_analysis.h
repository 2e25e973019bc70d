#pragma once
// What the flight recorder's dumps (parallel/flight_recorder.h) say about a hung or failed job:
// read every rank's <dir>/flight_r<rank>.json and compare them collective by collective, per
// communicator (group, matched across ranks by name: "world", "split1", ...). zt-trace prints it.
//
// Findings, in the order a reader needs them:
//  1. divergence: the first sequence number of a group where the ranks' calls differ (op, bytes,
//     dtype, reduce op or root): every rank must call collectives in the same order with the same
//     sizes (parallel/communicator.h), so the first difference is the bug, e.g. a stage-3 unit
//     called on some ranks only. The odd rank is the one outside the majority (with two ranks,
//     neither is: both are named);
//  2. never entered: a collective some ranks are waiting in (not completed) that other member
//     ranks never reached (their last recorded sequence number is lower);
//  3. slowest rank: per collective, the rank that arrived last (latest enqueue time) and by how
//     much; the summary names the rank that was last most often.
// A ring that wrapped only holds each rank's last entries: comparisons start at the first
// sequence number every rank still holds.

#include <cstdint>
#include <string>
#include <vector>

namespace zt::tools {

struct TraceEntry {
  uint64_t seq = 0;
  int group = 0;
  std::string op, dtype, detail, state;
  int64_t numel = 0, bytes = 0;
  int64_t enqueue_us = 0, start_us = 0, end_us = 0;
  bool finished() const { return state == "completed"; }
};

struct TraceGroup {
  int id = 0;
  std::string name;
  std::vector<int> ranks;
};

struct RankDump {
  int rank = 0, world_size = 0;
  std::string reason;
  uint64_t recorded = 0, capacity = 0;
  std::vector<TraceGroup> groups;
  std::vector<TraceEntry> entries;
};

// Parses one dump; throws zt::Error naming `origin` when it is not a flight recorder dump.
RankDump parse_dump(const std::string& json, const std::string& origin);
// Every flight_r<rank>.json in dir, by rank; throws when there is none.
std::vector<RankDump> read_dumps(const std::string& dir);

struct TraceReport {
  std::string verdict;                // one line: the most telling finding
  std::vector<std::string> findings;  // every finding, one line each
  std::string table;                  // per collective (for --verbose)
};

TraceReport analyze(const std::vector<RankDump>& dumps);

}  // namespace zt::tools
