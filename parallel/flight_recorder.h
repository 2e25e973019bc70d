#pragma once
// zt::dist::FlightRecorder: this process's last N collectives, kept so that a hang or a crash
// can be explained after the fact (docs/DESIGN.md, Flight recorder). tools/zt_trace_main.cpp
// reads the dumps of every rank and says where they diverged.
//
// Memory: one ring of `capacity` fixed-size FlightEntry slots (about 100 B each, no heap per
// collective), shared by every communicator of the process; an entry names its communicator by
// group id (0 = the world, then one id per split, in the order the splits were made, which is
// the same on every rank because splits are collective).
//
// Timeline of one entry (wall clock, microseconds since the epoch, so ranks on one host or under
// NTP compare):
//   enqueue  the caller asked the communicator for the collective
//   start    the backend accepted it (returned its Work): for the CPU backends the collective
//            now runs on the backend's thread; the time a peer arrives is not observable here
//   end      a wait() or is_completed() first saw it complete, fail or time out (under nccl,
//            where wait() orders the caller's stream instead of blocking, the time of that wait)
//
// Dumps: one JSON file per rank, <dir>/flight_r<rank>.json, written through a temporary name
// and renamed, so a reader never sees half a file. dump() is called
//   - by the recording communicator on a collective timeout or failure,
//   - on the job-wide fatal exit (a rank raising: base/fatal_exit.h),
//   - on SIGUSR1 (`ztrun --dump` forwards it to every rank) and on SIGSEGV, SIGABRT, SIGBUS and
//     SIGTERM, through a dumper thread (install_signal_dumps()).
// Signal safety: a signal handler only write()s one byte to a self-pipe (async-signal-safe); a
// dumper thread, which takes the ring's mutex and allocates as any thread may, writes the dump.
// SIGUSR1 and SIGTERM handlers return at once (the thread they interrupt may hold a lock the dump
// needs); after a SIGTERM's dump the dumper restores the previous handler and sends SIGTERM
// again, so the process ends as it would have, a few milliseconds later. A fault (SIGSEGV,
// SIGABRT, SIGBUS) cannot go on: its handler poll()s a second pipe until the dumper is done (at
// most kFatalDumpWaitMs), then re-raises with the previous handler. What is not safe: if the
// faulting thread holds the ring's mutex or the logger's (it faulted inside them), or the heap is
// corrupt, the dump cannot finish; the bounded wait then lets the process die as it would have
// without the recorder.

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace zt::dist {

enum class FlightState : uint8_t { kEnqueued, kStarted, kCompleted, kFailed, kTimedOut };
const char* to_string(FlightState state);

struct FlightEntry {
  uint64_t seq = 0;  // per group: 1, 2, ... in call order
  int32_t group = 0;
  FlightState state = FlightState::kEnqueued;
  char op[16] = {};      // "all_reduce", "reduce_scatter", "all_gather", "broadcast", ...
  char dtype[12] = {};   // "Float", "BFloat16", ...; empty for barrier
  char detail[16] = {};  // "sum", "root 0"; empty when there is nothing more to say
  int64_t numel = 0;     // of the tensor DeepSpeed's comms logger sizes (see comms_logger.h)
  int64_t bytes = 0;
  int64_t enqueue_us = 0, start_us = 0, end_us = 0;  // 0 = not reached
};

struct FlightGroup {
  int32_t id = 0;
  std::string name;        // "world", "split1", ...
  std::string backend;     // "mpi", "gloo", "nccl"
  std::vector<int> ranks;  // world ranks of its members, in its own rank order
};

class FlightRecorder {
 public:
  // Wait of a fatal signal's handler for the dumper thread.
  static constexpr int kFatalDumpWaitMs = 5000;

  // capacity 0 records nothing (record() returns kNoSlot at once).
  FlightRecorder(size_t capacity, std::string dir, int rank, int world_size);
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  size_t capacity() const { return ring_.size(); }
  const std::string& dir() const { return dir_; }
  int rank() const { return rank_; }
  std::string path() const;  // <dir>/flight_r<rank>.json

  int32_t add_group(std::string name, std::string backend, std::vector<int> ranks);

  static constexpr uint64_t kNoSlot = ~uint64_t{0};
  // Appends an entry (enqueue time now) and returns its ticket for mark(); overwrites the oldest
  // entry once the ring is full.
  uint64_t record(const FlightEntry& entry);
  // Sets the state and the matching time (start for kStarted, end otherwise). A ticket whose
  // slot was reused since is ignored; an entry never goes back from a final state.
  void mark(uint64_t ticket, FlightState state);

  // The entries still in the ring, oldest first.
  std::vector<FlightEntry> snapshot() const;
  uint64_t recorded() const;  // entries ever recorded
  std::string to_json(const std::string& reason) const;
  // Writes path(); returns false (and logs why) when it cannot. Never throws.
  bool dump(const std::string& reason) noexcept;

  static int64_t now_us();

 private:
  std::vector<FlightEntry> ring_;
  std::vector<uint64_t> tickets_;  // ticket of the entry in each slot
  std::vector<FlightGroup> groups_;
  std::string dir_;
  int rank_, world_size_;
  mutable std::mutex mutex_;
  uint64_t next_ = 0;  // ticket of the next entry; slot = ticket % capacity
  std::mutex dump_mutex_;
};

// The process's recorder, or nullptr when none was installed (recording off).
FlightRecorder* flight_recorder();
// Installs `recorder` for flight_recorder(), the fatal-exit dump and, when `signals`, the signal
// dumps (once per process; later calls keep the first recorder's handlers).
void install_flight_recorder(std::shared_ptr<FlightRecorder> recorder, bool signals);

// The flight recorder's settings from the environment (base/env_vars.h): ZT_FLIGHT_BUFFER_SIZE
// (entries, default kDefaultFlightEntries, 0 = off) and ZT_FLIGHT_DIR (default "zt_flight",
// relative to the working directory).
struct FlightOptions {
  static constexpr size_t kDefaultFlightEntries = 2000;
  size_t capacity = kDefaultFlightEntries;
  std::string dir = "zt_flight";
  static FlightOptions from_env();
};

}  // namespace zt::dist
