#pragma once
// Desync reporting: when a wait times out, say which rank reached which collective.
//
// Protocol (over the communicator's c10d Store, a side channel that does not depend on the
// possibly hung backend):
//  - a rank whose wait on collective #s has lasted half its timeout writes
//    key "desync/<rank>" = "<s> <kind>" (one store round trip, only on slow waits, so the normal
//    path costs nothing);
//  - at the timeout it writes the key again and reads every other rank's key without blocking
//    (Store::check, then get). A rank without a key is not waiting in any collective: it never
//    joined, died, or is busy elsewhere (that is usually the culprit).
// The report reads "rank 0: waiting at all_reduce #12; rank 1: waiting at all_reduce #12;
// rank 2: no report (not waiting in a collective: never joined, dead or busy)".
// Store failures (e.g. the store's server rank died) are reported inside the text, never thrown.

#include <chrono>
#include <memory>
#include <string>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "parallel/collective_info.h"

namespace zt::dist {

class DesyncReporter {
 public:
  // store may be null (then the report says it is unavailable).
  DesyncReporter(c10::intrusive_ptr<c10d::Store> store, int rank, int size, std::string backend);

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& backend() const { return backend_; }

  // Writes this rank's "waiting at" state; never throws.
  void publish_waiting(const CollectiveInfo& info) noexcept;
  // Removes the state again after a slow wait completed, so a stale "waiting at" never shows up
  // in a later report; never throws.
  void publish_done() noexcept;
  // Reads every rank's state; never throws.
  std::string report() noexcept;
  // Publishes, reads, and throws zt::Error(kTimeout):
  // "mpi all_reduce #12 (sum, 4 x Float) timed out on rank 1 of 4 after 3.00 s (timeout 3.00 s);
  //  desync: rank 0: ...".
  [[noreturn]] void throw_timeout(const CollectiveInfo& info, std::chrono::milliseconds elapsed,
                                  std::chrono::milliseconds timeout);

 private:
  c10::intrusive_ptr<c10d::Store> store_;
  int rank_;
  int size_;
  std::string backend_;
};

}  // namespace zt::dist
