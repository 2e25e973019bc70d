#include "parallel/gloo_communicator.h"

#include <atomic>
#include <cstdlib>
#include <sstream>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "base/env_vars.h"
#include "base/error.h"
#include "base/logging.h"
#include "parallel/async_work.h"
#include "parallel/route_interface.h"

namespace zt::dist {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMax: return c10d::ReduceOp(c10d::ReduceOp::MAX);
    case ReduceOp::kMin: return c10d::ReduceOp(c10d::ReduceOp::MIN);
    default: return c10d::ReduceOp(c10d::ReduceOp::SUM);  // avg: sum, then divide
  }
}

void check_gloo_tensor(const at::Tensor& t, const char* what, const char* op) {
  ZT_CHECK(t.defined(), "gloo ", op, ": ", what, " is undefined");
  ZT_CHECK(t.device().is_cpu(), "gloo ", op, ": ", what, " is on ", t.device(),
           "; the gloo backend takes CPU tensors (use nccl for CUDA)");
  ZT_CHECK(t.is_contiguous(), "gloo ", op, ": ", what, " must be contiguous");
}

void check_gloo_reduce(ReduceOp op, const at::Tensor& t, const char* name) {
  ZT_CHECK(!(op == ReduceOp::kAvg && c10::isIntegralType(t.scalar_type(), /*includeBool=*/true)),
           "gloo ", name, ": avg of integer tensors (", t.scalar_type(),
           ") is not supported; use sum and divide");
}

// A c10d Work seen through zerotorch's Work: waits in slices so that the desync state is
// published at half the timeout, maps gloo's failures to zt::Error, and runs `finish` (avg
// division) once after completion, on the waiting thread.
class GlooWork : public Work {
 public:
  GlooWork(c10::intrusive_ptr<c10d::Work> work, CollectiveInfo info,
           std::shared_ptr<DesyncReporter> desync, milliseconds default_timeout,
           std::function<void()> finish)
      : work_(std::move(work)),
        info_(std::move(info)),
        desync_(std::move(desync)),
        default_timeout_(default_timeout),
        finish_(std::move(finish)) {}

  void wait(milliseconds timeout) override {
    if (finished_) return;
    milliseconds limit = effective_timeout(timeout, default_timeout_);
    auto begin = Clock::now();
    auto elapsed = [&] { return std::chrono::duration_cast<milliseconds>(Clock::now() - begin); };
    bool published = false;
    for (;;) {
      milliseconds slice = published ? limit - elapsed() : limit / 2 - elapsed();
      if (slice.count() < 1) slice = milliseconds(1);
      try {
        work_->wait(slice);
        break;
      } catch (const std::exception& e) {
        if (work_->isCompleted()) {
          std::string what = first_line(e.what());
          if (what.find("imed out") != std::string::npos) {
            desync_->throw_timeout(info_, elapsed(), limit);
          }
          ZT_THROW_KIND(ErrorKind::kComm, "gloo ", info_.describe(), " failed on rank ",
                        desync_->rank(), ": ", what);
        }
        // Our slice elapsed with the collective still running.
      }
      if (elapsed() >= limit) desync_->throw_timeout(info_, elapsed(), limit);
      if (!published && elapsed() >= limit / 2) {
        published = true;
        desync_->publish_waiting(info_);
      }
    }
    if (published) desync_->publish_done();
    finished_ = true;
    if (finish_) finish_();
  }

  // Once wait() returned the collective is over, though c10d's work may not say so yet (its
  // reduce-scatter's stays unfinished after the wait): the flight recorder would otherwise keep
  // polling it, holding the work and the tensors it made (RecordingCommunicator::Unfinished).
  bool is_completed() override { return finished_.load() || work_->isCompleted(); }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  CollectiveInfo info_;
  std::shared_ptr<DesyncReporter> desync_;
  milliseconds default_timeout_;
  std::function<void()> finish_;
  std::atomic<bool> finished_{false};
};

// A work that is complete at once (zero-sized tensors): nothing to exchange.
class DoneWork : public Work {
 public:
  void wait(milliseconds) override {}
  bool is_completed() override { return true; }
};

}  // namespace

std::vector<std::string> gloo_interfaces(const std::string& master_addr, int master_port) {
  std::vector<std::string> names;
  if (const char* v = ::zt::env::get(env::kGlooSocketIfname); v != nullptr && *v != '\0') {
    std::stringstream list(v);
    for (std::string n; std::getline(list, n, ',');) {
      ZT_CHECK(!n.empty(), env::kGlooSocketIfname, "='", v, "' has an empty interface name");
      names.push_back(n);
    }
    ZT_LOG_DEBUG("gloo: binding ", v, " (", env::kGlooSocketIfname, ")");
    return names;
  }
  if (master_addr.empty()) return names;
  const RouteInterface r = interface_towards(master_addr, master_port);
  ZT_LOG_DEBUG("gloo: binding ", r.name, " (", r.local_address, "), the route to the rendezvous ",
               master_addr);
  names.push_back(r.name);
  return names;
}

GlooCommunicator::GlooCommunicator(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                                   milliseconds timeout, std::vector<std::string> interfaces)
    : rank_(rank),
      size_(size),
      store_(std::move(store)),
      timeout_(timeout),
      interfaces_(std::move(interfaces)) {
  try {
    auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
    for (const auto& name : interfaces_) {
      opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(name));
    }
    if (interfaces_.empty()) opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    opts->threads = 2;
    pg_ = c10::make_intrusive<c10d::ProcessGroupGloo>(
        c10::make_intrusive<c10d::PrefixStore>("gloo", store_), rank, size, opts);
  } catch (const zt::Error&) {
    throw;
  } catch (const std::exception& e) {
    ZT_THROW_KIND(ErrorKind::kComm, "gloo rendezvous failed on rank ", rank, " of ", size, ": ",
                  first_line(e.what()));
  }
  desync_ = std::make_shared<DesyncReporter>(store_, rank_, size_, backend_);
}

CollectiveInfo GlooCommunicator::next(const char* kind, std::string detail) {
  CollectiveInfo info;
  info.seq = ++seq_;
  info.kind = kind;
  info.detail = std::move(detail);
  return info;
}

WorkPtr GlooCommunicator::all_reduce(at::Tensor& t, ReduceOp op) {
  check_gloo_tensor(t, "tensor", "all_reduce");
  check_gloo_reduce(op, t, "all_reduce");
  CollectiveInfo info = next("all_reduce", detail::str(to_string(op), ", ", describe_tensor(t)));
  if (t.numel() == 0) return std::make_shared<DoneWork>();
  std::vector<at::Tensor> tensors{t};
  c10d::AllreduceOptions opts;
  opts.reduceOp = to_c10d(op);
  opts.timeout = timeout_;
  at::Tensor tensor = t;
  int size = size_;
  std::function<void()> finish;
  if (op == ReduceOp::kAvg) finish = [tensor, size]() mutable { tensor.div_(size); };
  return std::make_shared<GlooWork>(pg_->allreduce(tensors, opts), std::move(info), desync_,
                                    timeout_, std::move(finish));
}

WorkPtr GlooCommunicator::reduce_scatter(const at::Tensor& input, at::Tensor& output, ReduceOp op) {
  check_gloo_tensor(input, "input", "reduce_scatter");
  check_gloo_tensor(output, "output", "reduce_scatter");
  check_gloo_reduce(op, input, "reduce_scatter");
  ZT_CHECK(input.scalar_type() == output.scalar_type(), "gloo reduce_scatter: input is ",
           input.scalar_type(), " but output is ", output.scalar_type());
  ZT_CHECK(input.numel() == output.numel() * size_, "gloo reduce_scatter: input has ",
           input.numel(), " elements, expected size() * output.numel() = ", size_, " * ",
           output.numel());
  CollectiveInfo info =
      next("reduce_scatter", detail::str(to_string(op), ", ", describe_tensor(input)));
  if (output.numel() == 0) return std::make_shared<DoneWork>();
  c10d::ReduceScatterOptions opts;
  opts.reduceOp = to_c10d(op);
  opts.timeout = timeout_;
  at::Tensor in = input.view({-1}), out = output.view({-1});
  int size = size_;
  std::function<void()> finish;
  if (op == ReduceOp::kAvg) finish = [out, size]() mutable { out.div_(size); };
  return std::make_shared<GlooWork>(pg_->_reduce_scatter_base(out, in, opts), std::move(info),
                                    desync_, timeout_, std::move(finish));
}

WorkPtr GlooCommunicator::all_gather(const at::Tensor& input, at::Tensor& output) {
  check_gloo_tensor(input, "input", "all_gather");
  check_gloo_tensor(output, "output", "all_gather");
  ZT_CHECK(input.scalar_type() == output.scalar_type(), "gloo all_gather: input is ",
           input.scalar_type(), " but output is ", output.scalar_type());
  ZT_CHECK(output.numel() == input.numel() * size_, "gloo all_gather: output has ", output.numel(),
           " elements, expected size() * input.numel() = ", size_, " * ", input.numel());
  CollectiveInfo info = next("all_gather", describe_tensor(input));
  if (input.numel() == 0) return std::make_shared<DoneWork>();
  c10d::AllgatherOptions opts;
  opts.timeout = timeout_;
  at::Tensor in = input.view({-1}), out = output.view({-1});
  // gloo copies the input into the output's slot with memcpy, which may not copy a region onto
  // itself: an in-place call gathers from a copy (MPI and NCCL take it in place).
  if (in.data_ptr() == static_cast<char*>(out.data_ptr()) +
                           static_cast<int64_t>(rank_) * in.numel() * in.element_size()) {
    in = in.clone();
  }
  return std::make_shared<GlooWork>(pg_->_allgather_base(out, in, opts), std::move(info), desync_,
                                    timeout_, nullptr);
}

WorkPtr GlooCommunicator::all_to_all(const at::Tensor& input, at::Tensor& output) {
  check_gloo_tensor(input, "input", "all_to_all");
  check_gloo_tensor(output, "output", "all_to_all");
  check_all_to_all(input, output, size_, "gloo");
  CollectiveInfo info = next("all_to_all", describe_tensor(input));
  if (input.numel() == 0) return std::make_shared<DoneWork>();
  c10d::AllToAllOptions opts;
  opts.timeout = timeout_;
  at::Tensor in = input.view({-1}), out = output.view({-1});
  std::vector<int64_t> equal_splits;  // empty: size() equal chunks
  return std::make_shared<GlooWork>(pg_->alltoall_base(out, in, equal_splits, equal_splits, opts),
                                    std::move(info), desync_, timeout_, nullptr);
}

WorkPtr GlooCommunicator::broadcast(at::Tensor& t, int root) {
  check_gloo_tensor(t, "tensor", "broadcast");
  ZT_CHECK(root >= 0 && root < size_, "gloo broadcast: root ", root, " is outside 0..", size_ - 1);
  CollectiveInfo info = next("broadcast", detail::str("root ", root, ", ", describe_tensor(t)));
  if (t.numel() == 0) return std::make_shared<DoneWork>();
  std::vector<at::Tensor> tensors{t};
  c10d::BroadcastOptions opts;
  opts.rootRank = root;
  opts.timeout = timeout_;
  return std::make_shared<GlooWork>(pg_->broadcast(tensors, opts), std::move(info), desync_,
                                    timeout_, nullptr);
}

WorkPtr GlooCommunicator::barrier() {
  CollectiveInfo info = next("barrier", "");
  c10d::BarrierOptions opts;
  opts.timeout = timeout_;
  return std::make_shared<GlooWork>(pg_->barrier(opts), std::move(info), desync_, timeout_,
                                    nullptr);
}

std::shared_ptr<Communicator> GlooCommunicator::split(const std::vector<int>& ranks) {
  int index = -1;
  for (size_t i = 0; i < ranks.size(); ++i) {
    ZT_CHECK(ranks[i] >= 0 && ranks[i] < size_, "gloo split: rank ", ranks[i], " is outside 0..",
             size_ - 1);
    if (ranks[i] == rank_) index = static_cast<int>(i);
  }
  int split_id = splits_++;
  ++seq_;
  if (index < 0) return nullptr;
  auto store = c10::make_intrusive<c10d::PrefixStore>("split" + std::to_string(split_id), store_);
  return std::make_shared<GlooCommunicator>(store, index, static_cast<int>(ranks.size()), timeout_,
                                            interfaces_);
}

}  // namespace zt::dist
