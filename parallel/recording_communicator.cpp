#include "parallel/recording_communicator.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <cxxabi.h>
#include <deque>
#include <dlfcn.h>
#include <mutex>
#include <utility>

#include <torch/cuda.h>

#include "base/error.h"
#include "base/logging.h"

namespace zt::dist {

namespace {

void copy_name(char* dst, size_t n, const std::string& src) {
  std::strncpy(dst, src.c_str(), n - 1);
  dst[n - 1] = '\0';
}

// The function that called the communicator, for the comms logger's `debug` record names:
// DeepSpeed's get_caller_func() as far as C++ can tell (dladdr sees exported symbols only; a
// static function shows as its address).
std::string caller_name(void* address) {
  Dl_info info{};
  if (::dladdr(address, &info) == 0 || info.dli_sname == nullptr) {
    return detail::str(address);
  }
  int status = 0;
  char* demangled = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
  std::string name = status == 0 && demangled != nullptr ? demangled : info.dli_sname;
  std::free(demangled);
  const auto paren = name.find('(');
  return paren == std::string::npos ? name : name.substr(0, paren);
}

}  // namespace

// Collectives whose wait() returned before they ended: under NCCL wait() only orders the compute
// stream after the collective, so "waited" says nothing about "done". Each is polled when the
// communicator issues its next collective (is_completed queries the collective's event, which
// never blocks) and marked completed then; one still running when the recorder dumps shows as
// started, as a hung collective must.
class RecordingCommunicator::Unfinished {
 public:
  void add(WorkPtr work, uint64_t ticket) {
    std::lock_guard<std::mutex> lock(mu_);
    // Bounded: the oldest keeps its "started" mark (its slot is long reused by then anyway).
    if (works_.size() >= kMax) works_.pop_front();
    works_.emplace_back(std::move(work), ticket);
  }
  void poll(FlightRecorder& recorder) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = works_.begin(); it != works_.end();) {
      FlightState state = FlightState::kCompleted;
      try {
        if (!it->first->is_completed()) {
          ++it;
          continue;
        }
      } catch (const std::exception&) {  // the backend's failure, raised again to its waiter
        state = FlightState::kFailed;
      }
      recorder.mark(it->second, state);
      it = works_.erase(it);
    }
  }

 private:
  static constexpr size_t kMax = 1024;
  std::mutex mu_;
  std::deque<std::pair<WorkPtr, uint64_t>> works_;
};

namespace {

// Marks the recorder's entry once a wait or poll sees the collective end (a wait that returns
// before the end, a stream-ordered one, leaves it to RecordingCommunicator::Unfinished); a
// timeout or a failure also dumps the recorder.
class RecordedWork : public Work {
 public:
  RecordedWork(WorkPtr inner, std::shared_ptr<FlightRecorder> recorder, uint64_t ticket,
               std::shared_ptr<RecordingCommunicator::Unfinished> unfinished)
      : inner_(std::move(inner)),
        recorder_(std::move(recorder)),
        ticket_(ticket),
        unfinished_(std::move(unfinished)) {}

  void wait(std::chrono::milliseconds timeout) override {
    if (done_.load(std::memory_order_acquire)) return inner_->wait(timeout);
    try {
      inner_->wait(timeout);
    } catch (const Error& e) {
      const bool timed_out = e.kind() == ErrorKind::kTimeout;
      recorder_->mark(ticket_, timed_out ? FlightState::kTimedOut : FlightState::kFailed);
      recorder_->dump(timed_out ? "collective timeout" : "collective failure");
      throw;
    } catch (...) {
      recorder_->mark(ticket_, FlightState::kFailed);
      recorder_->dump("collective failure");
      throw;
    }
    if (inner_->is_completed()) {
      finish();
    } else if (!deferred_.exchange(true)) {
      unfinished_->add(inner_, ticket_);
    }
  }

  bool is_completed() override {
    if (done_.load(std::memory_order_acquire)) return true;
    if (!inner_->is_completed()) return false;
    finish();
    return true;
  }

 private:
  void finish() {
    if (!done_.exchange(true, std::memory_order_acq_rel)) {
      recorder_->mark(ticket_, FlightState::kCompleted);
    }
  }

  WorkPtr inner_;
  std::shared_ptr<FlightRecorder> recorder_;
  uint64_t ticket_;
  std::shared_ptr<RecordingCommunicator::Unfinished> unfinished_;
  std::atomic<bool> done_{false};
  std::atomic<bool> deferred_{false};
};

}  // namespace

RecordingCommunicator::RecordingCommunicator(std::shared_ptr<Communicator> inner,
                                             std::shared_ptr<FlightRecorder> recorder,
                                             std::shared_ptr<CommsLogger> logger, int32_t group,
                                             std::vector<int> world_ranks)
    : inner_(std::move(inner)),
      recorder_(std::move(recorder)),
      logger_(std::move(logger)),
      group_(group),
      world_ranks_(std::move(world_ranks)),
      unfinished_(std::make_shared<Unfinished>()) {}

template <typename Issue>
WorkPtr RecordingCommunicator::record(const char* op, const at::Tensor* sized,
                                      const std::string& detail, void* caller, Issue&& issue) {
  const uint64_t seq = ++seq_;
  const int64_t numel = sized != nullptr ? sized->numel() : 0;
  const int64_t bytes = sized != nullptr ? numel * static_cast<int64_t>(sized->element_size()) : 0;
  uint64_t ticket = FlightRecorder::kNoSlot;
  if (recorder_) {
    unfinished_->poll(*recorder_);
    FlightEntry e;
    e.seq = seq;
    e.group = group_;
    e.numel = numel;
    e.bytes = bytes;
    copy_name(e.op, sizeof(e.op), op);
    if (sized != nullptr) copy_name(e.dtype, sizeof(e.dtype), c10::toString(sized->scalar_type()));
    copy_name(e.detail, sizeof(e.detail), detail);
    ticket = recorder_->record(e);
  }
  const bool profiled = logger_ && logger_->profiles(op);
  const auto begin = std::chrono::steady_clock::now();
  WorkPtr work;
  try {
    work = issue();
  } catch (...) {
    if (recorder_) {
      recorder_->mark(ticket, FlightState::kFailed);
      recorder_->dump("collective failure");
    }
    throw;
  }
  if (recorder_) {
    recorder_->mark(ticket, FlightState::kStarted);
    work = std::make_shared<RecordedWork>(std::move(work), recorder_, ticket, unfinished_);
  }
  if (profiled) {
    work->wait();
    // Under nccl wait() only orders the current stream: synchronize the device as DeepSpeed's
    // timed_op does, so the latency is the collective's.
    if (inner_->device().is_cuda()) torch::cuda::synchronize(inner_->device().index());
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
    std::string name = op;
    if (logger_->options().debug) name += " | [Caller Func: " + caller_name(caller) + "]";
    logger_->append(op, name, ms, bytes, inner_->size());
  }
  return work;
}

// __builtin_return_address(0) is read in each override itself: that is the engine's call site.
WorkPtr RecordingCommunicator::all_reduce(at::Tensor& t, ReduceOp op) {
  return record("all_reduce", &t, to_string(op), __builtin_return_address(0),
                [&] { return inner_->all_reduce(t, op); });
}

WorkPtr RecordingCommunicator::reduce_scatter(const at::Tensor& input, at::Tensor& output,
                                              ReduceOp op) {
  return record("reduce_scatter", &input, to_string(op), __builtin_return_address(0),
                [&] { return inner_->reduce_scatter(input, output, op); });
}

WorkPtr RecordingCommunicator::all_gather(const at::Tensor& input, at::Tensor& output) {
  return record("all_gather", &input, "", __builtin_return_address(0),
                [&] { return inner_->all_gather(input, output); });
}

WorkPtr RecordingCommunicator::all_to_all(const at::Tensor& input, at::Tensor& output) {
  return record("all_to_all", &input, "", __builtin_return_address(0),
                [&] { return inner_->all_to_all(input, output); });
}

WorkPtr RecordingCommunicator::broadcast(at::Tensor& t, int root) {
  return record("broadcast", &t, detail::str("root ", root), __builtin_return_address(0),
                [&] { return inner_->broadcast(t, root); });
}

WorkPtr RecordingCommunicator::barrier() {
  return record("barrier", nullptr, "", __builtin_return_address(0),
                [&] { return inner_->barrier(); });
}

std::shared_ptr<Communicator> RecordingCommunicator::split(const std::vector<int>& ranks) {
  std::shared_ptr<Communicator> sub = inner_->split(ranks);
  // Every rank of this communicator counts the split, members or not, so ids agree.
  const int index = ++splits_;
  if (!sub) return nullptr;
  std::vector<int> world;
  for (int r : ranks) world.push_back(world_ranks_.at(static_cast<size_t>(r)));
  int32_t group = 0;
  if (recorder_) {
    std::string name = group_ == 0 ? "split" : detail::str("g", group_, ".split");
    group = recorder_->add_group(name + std::to_string(index), inner_->backend(), world);
  }
  return std::make_shared<RecordingCommunicator>(std::move(sub), recorder_, logger_, group,
                                                 std::move(world));
}

std::shared_ptr<Communicator> record_collectives(std::shared_ptr<Communicator> comm,
                                                 const FlightOptions& flight,
                                                 const CommsLoggerOptions& comms_logger) {
  if (flight.capacity == 0 && !comms_logger.enabled) return comm;
  std::vector<int> world(static_cast<size_t>(comm->size()));
  for (size_t r = 0; r < world.size(); ++r) world[r] = static_cast<int>(r);
  std::shared_ptr<FlightRecorder> recorder;
  int32_t group = 0;
  if (flight.capacity > 0) {
    recorder =
        std::make_shared<FlightRecorder>(flight.capacity, flight.dir, comm->rank(), comm->size());
    group = recorder->add_group("world", comm->backend(), world);
    install_flight_recorder(recorder, /*signals=*/true);
  }
  std::shared_ptr<CommsLogger> logger;
  if (comms_logger.enabled) logger = std::make_shared<CommsLogger>(comms_logger, comm->rank());
  return std::make_shared<RecordingCommunicator>(std::move(comm), std::move(recorder),
                                                 std::move(logger), group, std::move(world));
}

CommsLogger* comms_logger_of(Communicator& comm) {
  auto* recording = dynamic_cast<RecordingCommunicator*>(&comm);
  return recording != nullptr ? recording->comms_logger().get() : nullptr;
}

}  // namespace zt::dist
