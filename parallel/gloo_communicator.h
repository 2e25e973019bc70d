#pragma once
// GlooCommunicator: the Communicator over LibTorch's c10d ProcessGroupGloo (CPU tensors), with
// the job store (job_store.h) as gloo's rendezvous.
//
//   all_reduce      ProcessGroupGloo::allreduce           avg = sum, then t /= size()
//   reduce_scatter  ProcessGroupGloo::_reduce_scatter_base (gloo has no native reduce-scatter:
//                   torch builds it from an all-reduce of the whole input, twice MPI's traffic;
//                   the commbench shows the cost)
//   all_gather      ProcessGroupGloo::_allgather_base
//   all_to_all      ProcessGroupGloo::alltoall_base (equal chunks)
//   broadcast       ProcessGroupGloo::broadcast
//   barrier         ProcessGroupGloo::barrier
//   split           a new ProcessGroupGloo over the listed ranks (namespaced in the store)
// Gloo's own timeout is set to CommOptions::timeout as a backstop; wait() enforces it too and
// turns either into the desync timeout error.
//
// Soundness of the build against gloo headers: the torch wheel ships ProcessGroupGloo.hpp but not
// gloo's headers, which it includes. We compile against Debian's libgloo-dev headers (an older
// gloo than the commit torch pins) and therefore only use what does not depend on gloo's class
// layouts: ProcessGroupGloo's and Options' own members that name gloo types are all
// std::shared_ptr / std::unique_ptr (layout independent of the pointee), the constructor,
// createDefaultDevice() and every collective are out-of-line functions compiled inside
// libtorch_cpu with torch's own gloo, and we call collectives only through the c10d::Backend
// base (whose header is gloo-free). We never dereference a gloo object nor call an inline member
// that does (e.g. ProcessGroupGloo::setTimeout). No gloo library is linked: every gloo symbol
// comes from libtorch_cpu.

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "parallel/collective_info.h"
#include "parallel/communicator.h"
#include "parallel/desync.h"

namespace zt::dist {

// The interfaces gloo binds (docs/DESIGN.md, Communicator), in this order:
//  1. GLOO_SOCKET_IFNAME, comma-separated names, one gloo device per interface (PyTorch's c10d
//     reads the variable the same way);
//  2. with a rendezvous address: the interface the kernel routes to it through
//     (route_interface.h), whatever the hostname resolves to;
//  3. none (empty): gloo's default device (one process without a rendezvous address).
std::vector<std::string> gloo_interfaces(const std::string& master_addr, int master_port);

class GlooCommunicator : public Communicator {
 public:
  // Collective over the store's ranks: every rank of `size` calls it with the same store.
  // `interfaces`: the network interfaces gloo binds, one device each (empty: gloo's default
  // device, from the hostname); gloo_interfaces() picks them.
  GlooCommunicator(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                   std::chrono::milliseconds timeout, std::vector<std::string> interfaces = {});

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& backend() const override { return backend_; }

  WorkPtr all_reduce(at::Tensor& t, ReduceOp op = ReduceOp::kSum) override;
  WorkPtr reduce_scatter(const at::Tensor& input, at::Tensor& output,
                         ReduceOp op = ReduceOp::kSum) override;
  WorkPtr all_gather(const at::Tensor& input, at::Tensor& output) override;
  WorkPtr all_to_all(const at::Tensor& input, at::Tensor& output) override;
  WorkPtr broadcast(at::Tensor& t, int root) override;
  WorkPtr barrier() override;
  std::shared_ptr<Communicator> split(const std::vector<int>& ranks) override;

 private:
  CollectiveInfo next(const char* kind, std::string detail);

  int rank_;
  int size_;
  std::string backend_ = "gloo";
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::Backend> pg_;
  std::shared_ptr<DesyncReporter> desync_;
  std::chrono::milliseconds timeout_;
  std::vector<std::string> interfaces_;
  uint64_t seq_ = 0;
  int splits_ = 0;
};

}  // namespace zt::dist
