#include "parallel/flight_recorder.h"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <poll.h>
#include <sstream>
#include <thread>
#include <unistd.h>

#include "base/env_vars.h"
#include "base/error.h"
#include "base/fatal_exit.h"
#include "base/logging.h"

namespace zt::dist {

const char* to_string(FlightState state) {
  switch (state) {
    case FlightState::kEnqueued: return "enqueued";
    case FlightState::kStarted: return "started";
    case FlightState::kCompleted: return "completed";
    case FlightState::kFailed: return "failed";
    case FlightState::kTimedOut: return "timed-out";
  }
  return "?";
}

namespace {

bool is_final(FlightState s) {
  return s == FlightState::kCompleted || s == FlightState::kFailed || s == FlightState::kTimedOut;
}

// Our own names only reach the dump, but a split name or dtype could carry a quote one day.
std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    out += c;
  }
  return out + "\"";
}

}  // namespace

FlightRecorder::FlightRecorder(size_t capacity, std::string dir, int rank, int world_size)
    : ring_(capacity),
      tickets_(capacity, kNoSlot),
      dir_(std::move(dir)),
      rank_(rank),
      world_size_(world_size) {}

std::string FlightRecorder::path() const {
  return dir_ + "/flight_r" + std::to_string(rank_) + ".json";
}

int64_t FlightRecorder::now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int32_t FlightRecorder::add_group(std::string name, std::string backend, std::vector<int> ranks) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto id = static_cast<int32_t>(groups_.size());
  groups_.push_back({id, std::move(name), std::move(backend), std::move(ranks)});
  return id;
}

uint64_t FlightRecorder::record(const FlightEntry& entry) {
  if (ring_.empty()) return kNoSlot;
  const int64_t now = now_us();
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t ticket = next_++;
  const size_t slot = ticket % ring_.size();
  ring_[slot] = entry;
  ring_[slot].enqueue_us = now;
  tickets_[slot] = ticket;
  return ticket;
}

void FlightRecorder::mark(uint64_t ticket, FlightState state) {
  if (ticket == kNoSlot) return;
  const int64_t now = now_us();
  std::lock_guard<std::mutex> lock(mutex_);
  const size_t slot = ticket % ring_.size();
  if (tickets_[slot] != ticket || is_final(ring_[slot].state)) return;
  ring_[slot].state = state;
  (state == FlightState::kStarted ? ring_[slot].start_us : ring_[slot].end_us) = now;
}

std::vector<FlightEntry> FlightRecorder::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<FlightEntry> out;
  const uint64_t first = next_ > ring_.size() ? next_ - ring_.size() : 0;
  for (uint64_t t = first; t < next_; ++t) out.push_back(ring_[t % ring_.size()]);
  return out;
}

uint64_t FlightRecorder::recorded() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return next_;
}

std::string FlightRecorder::to_json(const std::string& reason) const {
  std::vector<FlightEntry> entries = snapshot();
  std::vector<FlightGroup> groups;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    groups = groups_;
  }
  std::ostringstream os;
  os << "{\n  \"version\": 1,\n  \"rank\": " << rank_ << ",\n  \"world_size\": " << world_size_
     << ",\n  \"pid\": " << ::getpid() << ",\n  \"reason\": " << json_string(reason)
     << ",\n  \"dumped_us\": " << now_us() << ",\n  \"capacity\": " << ring_.size()
     << ",\n  \"recorded\": " << recorded() << ",\n  \"groups\": [";
  for (size_t i = 0; i < groups.size(); ++i) {
    const FlightGroup& g = groups[i];
    os << (i ? ",\n" : "\n") << "    {\"id\": " << g.id << ", \"name\": " << json_string(g.name)
       << ", \"backend\": " << json_string(g.backend) << ", \"ranks\": [";
    for (size_t r = 0; r < g.ranks.size(); ++r) os << (r ? ", " : "") << g.ranks[r];
    os << "]}";
  }
  os << "\n  ],\n  \"entries\": [";
  for (size_t i = 0; i < entries.size(); ++i) {
    const FlightEntry& e = entries[i];
    os << (i ? ",\n" : "\n") << "    {\"seq\": " << e.seq << ", \"group\": " << e.group
       << ", \"op\": " << json_string(e.op) << ", \"dtype\": " << json_string(e.dtype)
       << ", \"detail\": " << json_string(e.detail) << ", \"numel\": " << e.numel
       << ", \"bytes\": " << e.bytes << ", \"state\": " << json_string(to_string(e.state))
       << ", \"enqueue_us\": " << e.enqueue_us << ", \"start_us\": " << e.start_us
       << ", \"end_us\": " << e.end_us << "}";
  }
  os << "\n  ]\n}\n";
  return os.str();
}

bool FlightRecorder::dump(const std::string& reason) noexcept {
  try {
    // Two dumps at once (a timeout on one thread, SIGTERM on the dumper) write one after the
    // other; the later one, with the more recent state, stays.
    std::lock_guard<std::mutex> lock(dump_mutex_);
    std::filesystem::create_directories(dir_);
    const std::string final_path = path();
    const std::string tmp = final_path + ".tmp";
    {
      std::ofstream out(tmp, std::ios::trunc);
      out << to_json(reason);
      if (!out.flush()) {
        ZT_LOG_WARN("flight recorder: cannot write ", tmp);
        return false;
      }
    }
    std::filesystem::rename(tmp, final_path);
    ZT_LOG_INFO("flight recorder: ", reason, ": last ",
                std::min<uint64_t>(recorded(), ring_.size()), " collectives in ", final_path);
    return true;
  } catch (const std::exception& e) {
    ZT_LOG_WARN("flight recorder: cannot dump to ", dir_, ": ", e.what());
    return false;
  }
}

FlightOptions FlightOptions::from_env() {
  FlightOptions o;
  if (const char* v = ::zt::env::get(env::kFlightBufferSize); v != nullptr && *v != '\0') {
    char* end = nullptr;
    const long long n = std::strtoll(v, &end, 10);
    ZT_CHECK(end != v && *end == '\0' && n >= 0, env::kFlightBufferSize,
             " must be a number of entries >= 0 (0 = off), got '", v, "'");
    o.capacity = static_cast<size_t>(n);
  }
  if (const char* v = ::zt::env::get(env::kFlightDir); v != nullptr && *v != '\0') o.dir = v;
  return o;
}

// --- the process's recorder and its signal dumps ---

namespace {

// Set once, before any handler can run, and never destroyed: the dumper thread may still use it
// while the process exits and static objects are destroyed.
std::shared_ptr<FlightRecorder>* g_recorder = nullptr;
std::atomic<bool> g_installed{false};
int g_wake[2] = {-1, -1};  // handler -> dumper: one byte, the signal number
int g_done[2] = {-1, -1};  // dumper -> handler of a fatal signal: the dump is written
constexpr int kSignals[] = {SIGUSR1, SIGSEGV, SIGABRT, SIGBUS, SIGTERM};
struct sigaction g_previous[sizeof(kSignals) / sizeof(kSignals[0])];

const char* signal_name(int sig) {
  switch (sig) {
    case SIGUSR1: return "SIGUSR1";
    case SIGSEGV: return "SIGSEGV";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGTERM: return "SIGTERM";
  }
  return "signal";
}

void restore_previous(int sig) {
  for (size_t i = 0; i < sizeof(kSignals) / sizeof(kSignals[0]); ++i) {
    if (kSignals[i] == sig) ::sigaction(sig, &g_previous[i], nullptr);
  }
}

// Only async-signal-safe calls: write, poll, sigaction, raise. SIGUSR1 and SIGTERM return at
// once (the dumper ends the process after a SIGTERM's dump): the thread the signal lands on may
// hold a lock the dump needs (the logger's, the ring's), so it must not wait for the dump. A
// fault cannot go on, so it waits, bounded.
extern "C" void on_dump_signal(int sig) {
  const int saved_errno = errno;
  const auto byte = static_cast<unsigned char>(sig);
  ssize_t ignored = ::write(g_wake[1], &byte, 1);
  (void)ignored;
  if (sig != SIGUSR1 && sig != SIGTERM) {
    struct pollfd p {
      g_done[0], POLLIN, 0
    };
    ::poll(&p, 1, FlightRecorder::kFatalDumpWaitMs);
    restore_previous(sig);
    // Delivered when this handler returns, to the previous handler (by default: the process
    // ends as it would have). A fault re-executes the faulting instruction instead.
    if (sig != SIGSEGV && sig != SIGBUS) ::raise(sig);
  }
  errno = saved_errno;
}

void dumper_loop() {
  for (;;) {
    unsigned char byte = 0;
    const ssize_t n = ::read(g_wake[0], &byte, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n != 1) return;
    const int sig = byte;
    (*g_recorder)->dump(signal_name(sig));
    if (sig == SIGTERM) {
      // What the signal would have done, now that the dump is written.
      restore_previous(SIGTERM);
      ::kill(::getpid(), SIGTERM);
    } else if (sig != SIGUSR1) {
      ssize_t ignored = ::write(g_done[1], &byte, 1);
      (void)ignored;
    }
  }
}

void dump_on_fatal_exit() {
  if (g_recorder) (*g_recorder)->dump("fatal exit");
}

}  // namespace

FlightRecorder* flight_recorder() {
  return g_installed.load() && g_recorder != nullptr ? g_recorder->get() : nullptr;
}

void install_flight_recorder(std::shared_ptr<FlightRecorder> recorder, bool signals) {
  if (g_installed.exchange(true)) return;
  g_recorder = new std::shared_ptr<FlightRecorder>(std::move(recorder));
  add_fatal_exit_observer(&dump_on_fatal_exit);
  if (!signals) return;
  if (::pipe(g_wake) != 0 || ::pipe(g_done) != 0) {
    ZT_LOG_WARN("flight recorder: no pipe for the signal dumps; dumps on signals are off");
    return;
  }
  std::thread(dumper_loop).detach();
  struct sigaction sa {};
  sa.sa_handler = on_dump_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (size_t i = 0; i < sizeof(kSignals) / sizeof(kSignals[0]); ++i) {
    ::sigaction(kSignals[i], &sa, &g_previous[i]);
  }
}

}  // namespace zt::dist
