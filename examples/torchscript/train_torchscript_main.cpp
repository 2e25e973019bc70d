// train_torchscript: trains a model written in Python and saved with torch.jit.script
// (make_fixture.py) through zt::Engine (jit_module_adapter.h), then saves the trained module
// back as TorchScript, which Python loads (check_trained.py).
//
//   python examples/torchscript/make_fixture.py out     # out/model.pt, out/data.pt
//   ztrun --standalone --nproc-per-node 2 build/bin/train_torchscript --config configs/zero2.json
//       --model out/model.pt --data out/data.pt --steps 50 --out-dir out/run
//
// The model must export `loss(x, y) -> Tensor`; data.pt is a scripted module whose buffers `x`
// and `y` hold the dataset. Every step, each rank takes its own train_micro_batch_size_per_gpu
// rows of a permutation drawn from (seed, step), the same on every rank. Rank 0 writes
// <out-dir>/metrics.jsonl, <out-dir>/summary.json and <out-dir>/trained.pt.

#include <ATen/CPUGeneratorImpl.h>
#include <torch/script.h>
#include <torch/torch.h>

#include "base/logging.h"
#include "base/main_guard.h"
#include "examples/torchscript/jit_module_adapter.h"
#include "train/initialize.h"
#include "train/training_run.h"

namespace po = boost::program_options;

namespace zt::examples {

// The training run's pieces (train/): TrainingRun and its bookkeeping.
using namespace zt::train;

namespace {

struct Dataset {
  torch::Tensor x, y;  // (N, ...) and (N, ...): rows are samples
};

Dataset load_dataset(const std::string& path) {
  torch::jit::Module m = torch::jit::load(path);
  ZT_CHECK(m.hasattr("x") && m.hasattr("y"), path, ": the data module needs buffers x and y");
  Dataset d{m.attr("x").toTensor(), m.attr("y").toTensor()};
  ZT_CHECK(d.x.size(0) == d.y.size(0) && d.x.size(0) > 0, path, ": x has ", d.x.size(0),
           " rows, y ", d.y.size(0));
  return d;
}

// Mean loss over the whole dataset (every rank computes the same value; under stage 3 the
// forward runs inside engine.forward, which gathers the parameters). The dataset stays on the
// host; what a forward reads goes to the model's device.
double full_loss(Engine& engine, JitModuleAdapter& model, const Dataset& d,
                 const c10::Device& device) {
  engine.eval();
  torch::NoGradGuard no_grad;
  double loss = 0;
  engine.forward([&] {
    loss = model->call("loss", {d.x.to(device), d.y.to(device)}).item<double>();
    return torch::Tensor();
  });
  engine.train();
  return loss;
}

struct Args : RunArgs {
  std::string model, data;
};

int train(int argc, char** argv) {
  CliOptions cli("train_torchscript", "Trains a TorchScript model (torch.jit.script) with ZeRO.");
  Args a;
  cli.add()("model", po::value(&a.model)->required(), "TorchScript module exporting loss(x, y)")(
      "data", po::value(&a.data)->required(), "TorchScript module with buffers x and y")(
      "steps", po::value(&a.steps)->default_value(50), "optimizer steps")(
      "out-dir", po::value(&a.out_dir)->default_value("train_torchscript_out"),
      "metrics.jsonl, summary.json and trained.pt go here");
  if (!cli.parse(argc, argv)) return 0;
  ProgramValues program;
  program.total_steps = a.steps;
  Launch launch = zt::launch(cli, program);
  JitModuleAdapter model(torch::jit::load(a.model));
  const Dataset data = load_dataset(a.data);
  ZT_LOG_INFO("torchscript model ", a.model, ": ", model->named_parameters().size(),
              " parameter tensors; data ", data.x.sizes(), " -> ", data.y.sizes());
  // No units: at stage 3 the whole module is the root unit, gathered inside engine.forward.
  Training t = initialize(std::move(launch), model.ptr());
  TrainingRun run(t, a);
  const double before = full_loss(*t.engine, model, data, t.device);
  ZT_LOG_INFO("loss on the whole dataset before training: ", before);
  const int64_t micro = t.config.train_micro_batch_size_per_gpu;
  const int64_t per_step = micro * t.config.gradient_accumulation_steps * t.comm->size();
  const int64_t n = data.x.size(0);
  ZT_CHECK(per_step <= n, "train_torchscript: a step takes ", per_step, " rows, the data has ", n);
  for (int64_t step = run.first_step(); step <= a.steps; ++step) {
    run.begin_step();
    // The same permutation on every rank (seeded by step); rank r takes its own slices.
    torch::Generator gen = at::make_generator<at::CPUGeneratorImpl>(
        static_cast<uint64_t>(t.config.seed) * 1000003 + static_cast<uint64_t>(step));
    torch::Tensor order = torch::randperm(n, gen, torch::kLong);
    for (int64_t m = 0; m < t.config.gradient_accumulation_steps; ++m) {
      const int64_t begin = (m * t.comm->size() + t.comm->rank()) * micro;
      torch::Tensor idx = order.narrow(0, begin, micro);
      torch::Tensor loss = t.engine->forward([&] {
        return model->call("loss", {data.x.index_select(0, idx).to(t.device),
                                    data.y.index_select(0, idx).to(t.device)});
      });
      t.engine->backward(loss);
      t.engine->step();
      run.add(loss, nullptr, micro);
    }
    run.end_step(step, {}, [&](const StepTotals&) {
      return detail::str(" | lr ", t.engine->get_lr(), " | model states ",
                         t.engine->memory().model_state_bytes(), " B/rank");
    });
  }
  const double after = full_loss(*t.engine, model, data, t.device);
  ZT_LOG_INFO("loss on the whole dataset after training: ", after, " (before: ", before, ")");
  {
    // Full values on every rank (a collective at stage 3); rank 0 writes them, from the host so
    // that the file loads anywhere, as the fixture it was made from.
    Engine::GatheredParameters full(*t.engine);
    if (t.comm->rank() == 0) {
      torch::jit::Module host = model->jit().clone();
      host.to(torch::kCPU);
      host.save(a.out_dir + "/trained.pt");
    }
  }
  run.write_summary({{"stage", double(t.config.zero_optimization.stage)},
                     {"loss_before", before},
                     {"loss_after", after}});
  ZT_LOG_INFO("trained module saved to ", a.out_dir, "/trained.pt");
  t.comm->barrier()->wait();
  return 0;
}

}  // namespace
}  // namespace zt::examples

int main(int argc, char** argv) {
  return zt::run_main("train_torchscript", [&] { return zt::examples::train(argc, argv); });
}
