#include "base/error.h"

#include <atomic>
#include <cstdlib>

namespace zt {
namespace {

constexpr int kUnknownRank = -2;  // not yet looked up
std::atomic<int> g_rank{kUnknownRank};

int rank_from_environment() {
  for (const char* name : {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    if (const char* v = std::getenv(name)) {
      char* end = nullptr;
      long r = std::strtol(v, &end, 10);
      if (end != v && *end == '\0' && r >= 0) return static_cast<int>(r);
    }
  }
  return -1;
}

std::string located(const std::string& msg, const char* file, int line, int rank) {
  std::string where = std::string(file) + ":" + std::to_string(line);
  if (rank >= 0) where = "rank " + std::to_string(rank) + ", " + where;
  return msg + " [" + where + "]";
}

}  // namespace

int process_rank() {
  int r = g_rank.load();
  if (r == kUnknownRank) {
    r = rank_from_environment();
    g_rank.store(r);
  }
  return r;
}

void set_process_rank(int rank) {
  g_rank.store(rank);
}

std::string first_line(const std::string& message) {
  return message.substr(0, message.find('\n'));
}

std::string error_headline(const std::string& message) {
  const std::string first = first_line(message);
  if (first.rfind("The following operation failed in the TorchScript interpreter", 0) != 0) {
    return first;
  }
  const size_t end = message.find_last_not_of(" \n");
  if (end == std::string::npos) return first;
  const size_t newline = message.rfind('\n', end);
  const size_t start = newline == std::string::npos ? 0 : newline + 1;
  return message.substr(start, end + 1 - start);
}

Error::Error(ErrorKind kind, std::string message, const char* file, int line)
    : std::runtime_error(located(message, file, line, process_rank())),
      kind_(kind),
      message_(std::move(message)),
      file_(file),
      line_(line),
      rank_(process_rank()) {}

namespace detail {
void throw_error(ErrorKind kind, const char* file, int line, const std::string& msg) {
  throw Error(kind, msg, file, line);
}
}  // namespace detail
}  // namespace zt
