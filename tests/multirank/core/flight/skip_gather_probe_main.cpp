// zt_skip_gather_probe: a stage-3 model whose forward skips one unit on one rank (DeepSpeed's
// "ranks call a module a different number of times" hang), so the ranks' all-gathers stop
// matching. Run by flight_trace_test.sh, which expects the job to fail, every rank to leave a
// flight recorder dump, and zt-trace to name the rank and the collective.
//
//   zt_skip_gather_probe --skip-rank R --timeout-s S
//
// Three units of different sizes (so the mismatched gathers differ in bytes), no prefetch (so
// each unit's gather is issued exactly when it is called) and no persistent parameters.

#include <boost/program_options.hpp>
#include <iostream>

#include <torch/torch.h>

#include "base/main_guard.h"
#include "core/engine.h"
#include "core/zero/call_unit.h"
#include "parallel/dist.h"

namespace {
namespace po = boost::program_options;

struct SkippyImpl : torch::nn::Module {
  explicit SkippyImpl(bool skip_middle) : skip_(skip_middle) {
    u0 = register_module("u0", torch::nn::Linear(8, 8));
    u1 = register_module("u1", torch::nn::Linear(torch::nn::LinearOptions(8, 8).bias(false)));
    u2 = register_module("u2", torch::nn::Linear(8, 3));
  }
  // x: (B, 8) -> (B, 3)
  torch::Tensor forward(torch::Tensor x) {
    x = torch::tanh(zt::call_unit(*u0, x));
    if (!skip_) x = torch::tanh(zt::call_unit(*u1, x));
    return zt::call_unit(*u2, x);
  }
  bool skip_;
  torch::nn::Linear u0{nullptr}, u1{nullptr}, u2{nullptr};
};
TORCH_MODULE(Skippy);

int probe(int argc, char** argv) {
  int skip_rank = -1, timeout_s = 5, steps = 2;
  po::options_description desc("zt_skip_gather_probe");
  desc.add_options()("skip-rank", po::value(&skip_rank), "the rank that skips unit u1")(
      "timeout-s", po::value(&timeout_s), "communicator timeout")(
      "steps", po::value(&steps), "training steps (the skip happens in the last one)");
  po::variables_map vm;
  po::store(po::parse_command_line(argc, argv, desc), vm);
  po::notify(vm);

  zt::dist::CommOptions co;
  co.timeout = std::chrono::seconds(timeout_s);
  auto comm = zt::dist::create_communicator(co);
  torch::manual_seed(1);
  zt::EngineOptions o;
  o.stage = 3;
  o.stage3_prefetch_bucket_size = 0;
  o.stage3_param_persistence_threshold = 0;
  o.units = {"u0", "u1", "u2"};
  o.optimizer.type = zt::optim::OptimizerKind::kAdamW;
  auto model = Skippy(false);
  zt::Engine engine(model.ptr(), o, comm);
  for (int step = 1; step <= steps; ++step) {
    // Healthy steps first, so the dumps hold matching history before the divergence.
    model->skip_ = step == steps && comm->rank() == skip_rank;
    torch::Tensor loss =
        engine.forward([&] { return model->forward(torch::randn({4, 8})).square().mean(); });
    engine.backward(loss);
    engine.step();
  }
  comm->barrier()->wait();
  std::cout << "probe: rank " << comm->rank() << " finished" << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return zt::run_main("zt_skip_gather_probe", [&] { return probe(argc, argv); });
}
