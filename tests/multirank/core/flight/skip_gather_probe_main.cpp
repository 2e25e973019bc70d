// zt_skip_gather_probe: a stage-3 model whose forward skips one unit on one rank in its last
// step (DeepSpeed's "ranks call a module a different number of times" hang). Run by
// flight_trace_test.sh, which expects the job to fail, every rank to leave a flight recorder
// dump, and zt-trace to name the rank and the collective.
//
//   zt_skip_gather_probe --skip-rank R --skip-unit u1|u2 [--stall-s S] --timeout-s T
//
// Skipping u1 makes rank R's next gather (u2's) meet the others' gather of u1: sizes differ, and
// the backend fails on the mismatch. Skipping u2, the last unit, leaves the others waiting in
// u2's gather while rank R, with --stall-s, is busy elsewhere (as a rank stuck outside any
// collective): they time out. Three units of different sizes, no prefetch (each unit's gather
// is issued exactly when it is called) and no persistent parameters.

#include <boost/program_options.hpp>
#include <chrono>
#include <iostream>
#include <thread>

#include <torch/torch.h>

#include "base/main_guard.h"
#include "core/engine.h"
#include "core/zero/call_unit.h"
#include "parallel/dist.h"

namespace {
namespace po = boost::program_options;

struct SkippyImpl : torch::nn::Module {
  SkippyImpl() {
    u0 = register_module("u0", torch::nn::Linear(8, 8));
    u1 = register_module("u1", torch::nn::Linear(torch::nn::LinearOptions(8, 8).bias(false)));
    u2 = register_module("u2", torch::nn::Linear(8, 3));
  }
  // x: (B, 8) -> (B, 3)
  torch::Tensor forward(torch::Tensor x) {
    x = torch::tanh(zt::call_unit(*u0, x));
    if (skip_ != "u1") x = torch::tanh(zt::call_unit(*u1, x));
    if (skip_ != "u2") x = zt::call_unit(*u2, x);
    return x;
  }
  std::string skip_;  // the unit this rank does not call in this step
  torch::nn::Linear u0{nullptr}, u1{nullptr}, u2{nullptr};
};
TORCH_MODULE(Skippy);

int probe(int argc, char** argv) {
  int skip_rank = -1, timeout_s = 5, steps = 2;
  double stall_s = 0;
  std::string skip_unit = "u1";
  po::options_description desc("zt_skip_gather_probe");
  desc.add_options()("skip-rank", po::value(&skip_rank), "the rank that skips unit u1")(
      "timeout-s", po::value(&timeout_s), "communicator timeout")(
      "steps", po::value(&steps), "training steps (the skip happens in the last one)")(
      "skip-unit", po::value(&skip_unit), "u1 or u2")(
      "stall-s", po::value(&stall_s), "the skipping rank's sleep after its forward");
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
  auto model = Skippy();
  zt::Engine engine(model.ptr(), o, comm);
  for (int step = 1; step <= steps; ++step) {
    // Healthy steps first, so the dumps hold matching history before the divergence.
    const bool skips = step == steps && comm->rank() == skip_rank;
    model->skip_ = skips ? skip_unit : "";
    torch::Tensor loss = engine.forward([&] {
      return model->forward(torch::randn({4, 8})).square().mean();
    });
    if (skips) std::this_thread::sleep_for(std::chrono::duration<double>(stall_s));
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
