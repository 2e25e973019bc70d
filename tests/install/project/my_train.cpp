// my_train: a small causal LM trained with zerotorch from outside its tree. Its own model (an
// embedding, two residual MLP blocks as stage-3 units, a tied head), zt::initialize, and the
// config's data block over a token shard.
//
//   my_train --make-shard shard.ztt                       # a synthetic shard (one process)
//   ztrun --standalone --nproc-per-node 2 my_train --config cfg.yaml --shard shard.ztt --steps 5

#include <cmath>
#include <iostream>
#include <memory>

#include <torch/torch.h>

#include "base/main_guard.h"
#include "core/config/cli_options.h"
#include "core/zero/call_unit.h"
#include "data/token_shard_writer.h"
#include "train/initialize.h"

namespace po = boost::program_options;

struct BlockImpl : torch::nn::Module {
  explicit BlockImpl(int64_t d) : fc(register_module("fc", torch::nn::Linear(d, d))) {}
  torch::Tensor forward(const torch::Tensor& x) { return x + torch::gelu(fc->forward(x)); }
  torch::nn::Linear fc;
};
TORCH_MODULE(Block);

struct TinyLmImpl : torch::nn::Module {
  TinyLmImpl(int64_t vocab, int64_t d) {
    wte = register_module("wte", torch::nn::Embedding(vocab, d));
    blocks = register_module("blocks", torch::nn::ModuleList(Block(d), Block(d)));
  }
  // Mean cross-entropy of the next token over labels != -100 (the collator's shifted labels).
  torch::Tensor loss(const zt::data::Batch& b) {
    torch::Tensor x = wte->forward(b.input_ids);
    for (const auto& m : *blocks) x = zt::call_unit(*m->as<BlockImpl>(), x);
    torch::Tensor logits = torch::linear(x, wte->weight);
    return torch::nn::functional::cross_entropy(
        logits.flatten(0, 1).to(torch::kFloat), b.labels.flatten(),
        torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100));
  }
  std::vector<std::string> units() const { return {"blocks.0", "blocks.1"}; }
  torch::nn::Embedding wte{nullptr};
  torch::nn::ModuleList blocks{nullptr};
};
TORCH_MODULE(TinyLm);

// 200 samples of 4..19 tokens counting up modulo 50: easy to learn.
void make_shard(const std::string& path) {
  zt::data::TokenShardWriter w({50, 0, {}});
  w.set_meta("pad_id", "0");  // BatchStream pads with the shard's pad id
  for (int i = 0; i < 200; ++i) {
    std::vector<int> tokens;
    for (int k = 0; k < 4 + i % 16; ++k) tokens.push_back((i + k) % 50);
    w.add(tokens);
  }
  w.write(path);
}

int train(int argc, char** argv) {
  zt::CliOptionsSpec spec;
  spec.config_required = false;
  zt::CliOptions cli("my_train", "Trains a tiny LM with zerotorch.", spec);
  std::string shard, make;
  int64_t steps = 5;
  cli.add()("shard", po::value(&shard), "token shard")("steps", po::value(&steps), "steps")(
      "make-shard", po::value(&make), "write a synthetic shard here and exit");
  if (!cli.parse(argc, argv)) return 0;
  if (!make.empty()) {
    make_shard(make);
    return 0;
  }
  zt::ProgramValues program;
  program.total_steps = steps;  // the scheduler's, when the config says "auto"
  zt::Launch launch = zt::launch(cli, program);
  auto data = std::make_shared<const zt::data::TokenDataset>(shard);
  TinyLm model(data->vocab_size(), 32);
  zt::Training t = zt::initialize(
      std::move(launch), model.ptr(),
      {.units = model->units(), .train_data = data, .data = {.causal_lm_shift = true}});
  double first = NAN, last = NAN;
  for (int64_t step = 1; step <= steps; ++step) {
    for (int64_t m = 0; m < t.config.gradient_accumulation_steps; ++m) {
      zt::data::Batch b = *t.loader->next();
      torch::Tensor loss = t.engine->forward([&] { return model->loss(b); });
      t.engine->backward(loss);
      t.engine->step();
      last = loss.item<double>();
      if (step == 1 && m == 0) first = last;
    }
  }
  if (t.comm->rank() == 0) {
    std::cout << "my_train: " << steps << " steps on " << t.comm->size() << " ranks, stage "
              << t.config.zero_optimization.stage << ", loss " << first << " -> " << last
              << std::endl;
  }
  t.comm->barrier()->wait();
  return std::isfinite(last) && last < first ? 0 : 1;
}

int main(int argc, char** argv) {
  return zt::run_main("my_train", [&] { return train(argc, argv); });
}
