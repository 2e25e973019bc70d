#pragma once
// zt::dist::RecordingCommunicator: a Communicator that forwards every call to another one and
// records it, for the flight recorder (flight_recorder.h) and DeepSpeed's comms logger
// (comms_logger.h). create_communicator (dist.h) puts it around every backend when either is on;
// with both off the backend is returned bare, so recording costs nothing at all.
//
// Per collective, with the flight recorder on: one ring entry (enqueue time), marked started when
// the backend returns its Work, and completed / failed / timed out when a wait() or
// is_completed() on the returned Work first sees it. A wait() that returns before the collective
// ended (NCCL's, which only orders the compute stream) marks nothing: the collective is polled
// when the next one is issued, so a hung NCCL collective stays "started" in a dump. A wait() that
// times out or fails dumps the recorder (then rethrows the backend's error unchanged). With the
// comms logger profiling the op: the call waits for the collective before returning (comms_logger.h
// says why) and appends its latency.
//
// Extending: every virtual of Communicator must be overridden here and forwarded through
// record() (a collective) or directly (a query); a virtual missed here would reach the base
// class's "not supported" instead of the backend.

#include <memory>
#include <string>
#include <vector>

#include "parallel/comms_logger.h"
#include "parallel/communicator.h"
#include "parallel/flight_recorder.h"

namespace zt::dist {

class RecordingCommunicator : public Communicator {
 public:
  // recorder and logger may each be null (that part off). group: the recorder's group id of
  // `inner`; world_ranks: the world rank of each of its ranks.
  RecordingCommunicator(std::shared_ptr<Communicator> inner,
                        std::shared_ptr<FlightRecorder> recorder,
                        std::shared_ptr<CommsLogger> logger, int32_t group,
                        std::vector<int> world_ranks);

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const std::string& backend() const override { return inner_->backend(); }
  c10::Device device() const override { return inner_->device(); }

  WorkPtr all_reduce(at::Tensor& t, ReduceOp op = ReduceOp::kSum) override;
  WorkPtr reduce_scatter(const at::Tensor& input, at::Tensor& output,
                         ReduceOp op = ReduceOp::kSum) override;
  WorkPtr all_gather(const at::Tensor& input, at::Tensor& output) override;
  WorkPtr all_to_all(const at::Tensor& input, at::Tensor& output) override;
  WorkPtr broadcast(at::Tensor& t, int root) override;
  WorkPtr barrier() override;
  // The sub-communicator is recorded too, as a group of its own ("split1", "split2", ...).
  std::shared_ptr<Communicator> split(const std::vector<int>& ranks) override;

  Communicator& inner() { return *inner_; }
  class Unfinished;  // collectives waited for but not yet seen complete (the .cpp)
  const std::shared_ptr<CommsLogger>& comms_logger() const { return logger_; }
  const std::shared_ptr<FlightRecorder>& recorder() const { return recorder_; }

 private:
  template <typename Issue>
  WorkPtr record(const char* op, const at::Tensor* sized, const std::string& detail, void* caller,
                 Issue&& issue);

  std::shared_ptr<Communicator> inner_;
  std::shared_ptr<FlightRecorder> recorder_;
  std::shared_ptr<CommsLogger> logger_;
  int32_t group_;
  std::vector<int> world_ranks_;
  uint64_t seq_ = 0;
  int splits_ = 0;
  std::shared_ptr<Unfinished> unfinished_;
};

// `comm` wrapped for the flight recorder (capacity > 0) and the comms logger (enabled), or
// `comm` itself when both are off. The first recorder made in a process is the one dumps on
// signals and on the fatal exit use (install_flight_recorder).
std::shared_ptr<Communicator> record_collectives(std::shared_ptr<Communicator> comm,
                                                 const FlightOptions& flight,
                                                 const CommsLoggerOptions& comms_logger);

// The comms logger behind `comm`, or nullptr when it has none.
CommsLogger* comms_logger_of(Communicator& comm);

}  // namespace zt::dist
