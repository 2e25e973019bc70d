#pragma once
// DeepSpeed hostfiles and host filters.
//
// A hostfile lists one node per line, `HOSTNAME slots=N` (N processes, e.g. GPUs, on that node);
// `#` starts a comment, blank lines are skipped. The order of the lines is the order of the
// nodes: node 0 (which hosts rank 0 and the rendezvous) is the first line. A host listed twice is
// an error, as is any line of another shape (reported with its line number).
//
// Filters use DeepSpeed's syntax: `host1@host2:0,2` = all of host1, slots 0 and 2 of host2.
// --include keeps only what it names; --exclude drops what it names (a bare host drops the whole
// node). Naming a host that is not in the hostfile, or a slot past its count, is an error.

#include <string>
#include <vector>

namespace zt::launcher {

struct HostSlots {
  std::string host;
  int slots = 0;
};

// One node of the launch after filtering: its host and the local slot indices it keeps
// (0..slots-1 when unfiltered), ascending.
struct NodeAssignment {
  std::string host;
  std::vector<int> slots;
};

// `source` names the text in errors (usually the file's path).
std::vector<HostSlots> parse_hostfile(const std::string& text, const std::string& source);
// Reads and parses a file; an unreadable or empty hostfile is an error.
std::vector<HostSlots> read_hostfile(const std::string& path);

// Applies --include or --exclude (at most one non-empty); the result keeps hostfile order and is
// never empty (an error otherwise).
std::vector<NodeAssignment> filter_hosts(const std::vector<HostSlots>& hosts,
                                         const std::string& include, const std::string& exclude);

// s without its leading and trailing spaces, tabs and carriage returns (a CRLF line's '\r'):
// the line cleanup of the text files ztrun reads, hostfiles and .ztrun_env files.
std::string trim(const std::string& s);

}  // namespace zt::launcher
