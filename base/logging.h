#pragma once
// The one logger of zerotorch (spdlog underneath, kept out of this header so that LibTorch's
// bundled fmt and Debian's never meet in one translation unit).
//
// Lines look like `[zt r1 W 18:30:01.123] message`. The level comes from ZT_LOG_LEVEL
// (trace, debug, info, warn, error, off; default info). Info and below print on rank 0 only,
// unless ZT_LOG_ALL_RANKS=1; warnings and errors print on every rank.
//
//   ZT_LOG_INFO("step ", step, " loss ", loss);
//   ZT_LOG_WARN("zero_optimization.", key, " is not implemented; ignored");

#include <string>

#include "base/error.h"

namespace zt::log {

enum class Level { kTrace = 0, kDebug, kInfo, kWarn, kError, kOff };

// True when a message of this level would print on this rank.
bool enabled(Level level);
// Prints one message (no check of enabled(): callers use the macros).
void write(Level level, const std::string& message);
// Like write, but on every rank whatever the rank filter says.
void write_all_ranks(Level level, const std::string& message);
// Re-reads ZT_LOG_LEVEL / ZT_LOG_ALL_RANKS (tests change them).
void reload_from_environment();
Level parse_level(const std::string& name);  // throws zt::Error naming the bad value

}  // namespace zt::log

#define ZT_LOG_AT(level, ...)                                  \
  do {                                                         \
    if (::zt::log::enabled(level)) {                           \
      ::zt::log::write(level, ::zt::detail::str(__VA_ARGS__)); \
    }                                                          \
  } while (false)

#define ZT_LOG_TRACE(...) ZT_LOG_AT(::zt::log::Level::kTrace, __VA_ARGS__)
#define ZT_LOG_DEBUG(...) ZT_LOG_AT(::zt::log::Level::kDebug, __VA_ARGS__)
#define ZT_LOG_INFO(...) ZT_LOG_AT(::zt::log::Level::kInfo, __VA_ARGS__)
#define ZT_LOG_WARN(...) ZT_LOG_AT(::zt::log::Level::kWarn, __VA_ARGS__)
#define ZT_LOG_ERROR(...) ZT_LOG_AT(::zt::log::Level::kError, __VA_ARGS__)
