#pragma once
// Muon's step gradients (optim/muon.h orthogonalises whole matrices while a rank steps a slice of
// a bucket). Before the norm, per stepped bucket (prepare):
//
//   s = owned gradient * inv                                  // (stepped,) fp32, a new buffer
//   Muon elements of s: momentum folded in, s = Nesterov blend  // elementwise, on the slice
//   full = all_gather(s)       // (padded,), only for a bucket where a Muon matrix crosses a
//                              // shard boundary (the layout decides, so every rank agrees)
//   a Muon matrix inside the slice: O = orthogonalize(it, from s), into s
//   a Muon matrix crossing a boundary: one of its holders (in turn) orthogonalises it from full
//   into a zeroed (padded,) buffer; all_reduce(sum) of that buffer; each holder copies its part
//
// so every matrix is orthogonalised once, by one rank, and each element of the sum has one
// contribution (exact); the momentum stays sharded like the master. The norm and clipping then
// cover s (DeepSpeed's ZeRO stages take the norm over the Muon update, too), and the optimizer
// steps s with the clipping factor alone, each group range cut at the Muon matrices' edges with
// the lr scale of its half (optim/muon_spec.h).

#include <functional>
#include <memory>
#include <vector>

#include "core/zero/step_gradients.h"

namespace zt::zero {

class MuonGradients : public StepGradients {
 public:
  MuonGradients(const EngineOptions& options, std::vector<std::unique_ptr<Bucket>>& buckets,
                dist::Communicator& comm, WaitClock& clock,
                std::function<optim::ShardOptimizer&(size_t)> optimizer_of,
                c10::Device state_device);

  bool norm_needs_raw_sum() const override { return false; }
  double prepare(const std::vector<size_t>& stepped, double inv, double raw_sq) override;
  at::Tensor gradient(size_t b) const override;
  bool final_at_reduction() const override { return false; }  // prepare makes a new buffer
  double factor(double inv) const override {
    (void)inv;  // the prepared gradients carry it
    return 1.0;
  }
  std::vector<optim::GroupRange> ranges(size_t b,
                                        std::vector<optim::GroupRange> groups) const override;
  void release() override { grads_.clear(); }

 private:
  // A parameter Muon steps: its elements in the flat buffer and its shape.
  struct Matrix {
    dist::Range range;
    std::vector<int64_t> shape;
  };
  struct PerBucket {
    std::vector<Matrix> matrices;  // in flat order
    bool gather = false;           // some matrix crosses a shard boundary
  };
  // Bucket b's gradient times inv with the momentum folded in and its matrices orthogonalised.
  at::Tensor prepare_bucket(size_t b, double inv);

  const EngineOptions& options_;
  std::vector<std::unique_ptr<Bucket>>& buckets_;
  dist::Communicator& comm_;
  WaitClock& clock_;
  std::function<optim::ShardOptimizer&(size_t)> optimizer_of_;
  c10::Device state_device_;
  std::vector<PerBucket> buckets_matrices_;
  std::vector<at::Tensor> grads_;  // per stepped bucket, between prepare and release
};

}  // namespace zt::zero
