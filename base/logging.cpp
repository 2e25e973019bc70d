#include "base/logging.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>
#ifdef ZT_HAVE_SPDLOG
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#endif

namespace zt::log {
namespace {

struct State {
  Level level = Level::kInfo;
  bool all_ranks = false;
#ifdef ZT_HAVE_SPDLOG
  std::shared_ptr<spdlog::logger> logger;
#else
  std::mutex mutex;  // one line at a time, as spdlog's stderr_sink_mt
#endif
};

#ifdef ZT_HAVE_SPDLOG
spdlog::level::level_enum to_spdlog(Level level) {
  switch (level) {
    case Level::kTrace: return spdlog::level::trace;
    case Level::kDebug: return spdlog::level::debug;
    case Level::kInfo: return spdlog::level::info;
    case Level::kWarn: return spdlog::level::warn;
    case Level::kError: return spdlog::level::err;
    case Level::kOff: return spdlog::level::off;
  }
  return spdlog::level::info;
}
#endif

char letter(Level level) {
  return "TDIWE-"[static_cast<int>(level)];
}

void configure(State& s) {
  const char* lv = std::getenv("ZT_LOG_LEVEL");
  s.level = lv ? parse_level(lv) : Level::kInfo;
  const char* all = std::getenv("ZT_LOG_ALL_RANKS");
  s.all_ranks = all && std::string(all) != "0" && std::string(all) != "";
}

State& state() {
  static State* s = [] {
    auto* st = new State();  // leaked on purpose: usable from static destructors
    configure(*st);
#ifdef ZT_HAVE_SPDLOG
    st->logger =
        std::make_shared<spdlog::logger>("zt", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    st->logger->set_pattern("%v");
    st->logger->set_level(spdlog::level::trace);
    st->logger->flush_on(spdlog::level::trace);
#endif
    return st;
  }();
  return *s;
}

void emit(Level level, const std::string& message) {
  int rank = process_rank();
  std::string rank_part = rank >= 0 ? "r" + std::to_string(rank) + " " : "";
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  int ms = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm{};
  localtime_r(&t, &tm);
  char stamp[32];
  std::snprintf(stamp, sizeof stamp, "%02d:%02d:%02d.%03d", tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
#ifdef ZT_HAVE_SPDLOG
  state().logger->log(to_spdlog(level), "[zt {}{} {}] {}", rank_part, letter(level), stamp,
                      message);
#else
  // Built without spdlog (a reduced build): the same line, written and flushed under a lock.
  std::string line = "[zt " + rank_part + letter(level) + " " + stamp + "] " + message + "\n";
  std::lock_guard<std::mutex> lock(state().mutex);
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
#endif
}

}  // namespace

Level parse_level(const std::string& name) {
  std::string n = name;
  std::transform(n.begin(), n.end(), n.begin(), ::tolower);
  if (n == "trace") return Level::kTrace;
  if (n == "debug") return Level::kDebug;
  if (n == "info") return Level::kInfo;
  if (n == "warn" || n == "warning") return Level::kWarn;
  if (n == "error") return Level::kError;
  if (n == "off") return Level::kOff;
  ZT_THROW("ZT_LOG_LEVEL must be one of trace, debug, info, warn, error, off; got '", name, "'");
}

bool enabled(Level level) {
  const State& s = state();
  if (level < s.level || level == Level::kOff) return false;
  if (level >= Level::kWarn || s.all_ranks) return true;
  return process_rank() <= 0;
}

void write(Level level, const std::string& message) {
  emit(level, message);
}

void write_all_ranks(Level level, const std::string& message) {
  if (level >= state().level && level != Level::kOff) emit(level, message);
}

void reload_from_environment() {
  configure(state());
}

}  // namespace zt::log
