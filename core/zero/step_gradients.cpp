#include "core/zero/step_gradients.h"

#include <cmath>

#include "core/zero/muon_gradients.h"

namespace zt::zero {
namespace {

// Every elementwise optimizer: the reduced owned gradients as they are.
class OwnedGradients : public StepGradients {
 public:
  explicit OwnedGradients(std::vector<std::unique_ptr<Bucket>>& buckets) : buckets_(buckets) {}
  bool norm_needs_raw_sum() const override { return true; }
  double prepare(const std::vector<size_t>& stepped, double inv, double raw_sq) override {
    (void)stepped;
    return std::sqrt(raw_sq) * std::abs(inv);
  }
  at::Tensor gradient(size_t b) const override { return buckets_[b]->owned_grad(); }
  bool final_at_reduction() const override { return true; }
  double factor(double inv) const override { return inv; }

 private:
  std::vector<std::unique_ptr<Bucket>>& buckets_;
};

}  // namespace

std::unique_ptr<StepGradients> make_step_gradients(
    const optim::OptimizerSpec& spec, const EngineOptions& options,
    std::vector<std::unique_ptr<Bucket>>& buckets, dist::Communicator& comm, WaitClock& clock,
    std::function<optim::ShardOptimizer&(size_t)> optimizer_of, c10::Device state_device) {
  if (spec.type == optim::OptimizerKind::kMuon) {
    return std::make_unique<MuonGradients>(options, buckets, comm, clock, std::move(optimizer_of),
                                           state_device);
  }
  return std::make_unique<OwnedGradients>(buckets);
}

}  // namespace zt::zero
