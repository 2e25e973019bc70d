// Optimizers and schedules against DeepSpeed's own: the deepspeed package (CPU accelerator, one
// rank over gloo) trains a tiny model 10 steps in optimizer_deepspeed_peer.py, dumping the
// parameters after every step; zerotorch trains the same model from the same initial values on
// the same batches with the same config, and every parameter must equal DeepSpeed's within 1e-5
// after every step (fp32; with bf16 parameters, each element within one bf16 step). The cases:
//   muon      DeepSpeed's MuonWithAuxAdam at stage 0 (no clipping), stage 1 and stage 3 (clipping
//             0.5, which acts on every step);
//   onecycle  AdamW under the OneCycle schedule with its default cycle_momentum, which sets
//             Adam's betas every step (beta1 cycled, beta2 0.99), through the cycle and its decay;
//   bf16master, bf16states  DeepSpeed's bf16 master keys under CPU offload (DeepSpeedCPUAdam).
// One peer process runs every case. The DeepSpeed venv is scripts/setup_deepspeed.sh's
// (ZT_DS_VENV, default ~/.cache/zerotorch/venv-deepspeed); without it the tests skip, saying so.

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/config/config.h"
#include "core/config/engine_config.h"
#include "core/engine.h"
#include "tests/support/mpi_world.h"

namespace {

namespace fs = std::filesystem;

std::shared_ptr<zt::dist::Communicator>& g_comm = zt::testing::mpi_world();

constexpr int64_t kVocab = 11, kWidth = 8, kHidden = 16, kBatch = 4, kSeq = 5;
constexpr int kSteps = 10;
// The config blocks both sides read, by case name. Muon: DeepSpeed's engine takes lr for Muon's
// half, adam_lr for the auxiliary Adam's, and MuonWithAuxAdam's defaults for the rest (betas 0.9,
// 0.95; eps 1e-10). OneCycle: 4 steps up, 4 down, then 2 of decay, lr and momentum.
const std::map<std::string, std::string> kBlocks = {
    {"muon", R"("optimizer": {"type": "Muon", "params": {"lr": 0.02, "momentum": 0.9, )"
             R"("weight_decay": 0.1, "adam_lr": 0.003}})"},
    {"onecycle",
     R"("optimizer": {"type": "AdamW", "params": {"lr": 0.001, "weight_decay": 0.01}}, )"
     R"("scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 0.001, )"
     R"("cycle_max_lr": 0.01, "cycle_first_step_size": 4, "decay_step_size": 1, )"
     R"("decay_lr_rate": 0.1, "cycle_min_mom": 0.85, "cycle_max_mom": 0.95, )"
     R"("decay_mom_rate": 0.01}})"},
    // DeepSpeed's bf16 masters: master, gradients and (bf16states) Adam's moments in bf16,
    // stepped by DeepSpeedCPUAdam under CPU offload, as DeepSpeed requires without bf16 states.
    {"bf16master",
     R"("optimizer": {"type": "AdamW", "params": {"lr": 0.001, "weight_decay": 0.01}}, )"
     R"("bf16": {"enabled": true, "bf16_master_weights_and_grads": true}, )"
     R"("zero_optimization": {"offload_optimizer": {"device": "cpu"}})"},
    {"bf16states",
     R"("optimizer": {"type": "AdamW", "params": {"lr": 0.001, "weight_decay": 0.01}}, )"
     R"("bf16": {"enabled": true, "bf16_master_weights_and_grads": true, )"
     R"("bf16_optimizer_states": true}, )"
     R"("zero_optimization": {"offload_optimizer": {"device": "cpu"}})"}};

struct Case {
  std::string name;
  int stage;
  std::string clip;
  std::string dir() const { return name + "_stage" + std::to_string(stage) + "_clip" + clip; }
};
const std::vector<Case> kMuonCases = {{"muon", 0, "0"}, {"muon", 1, "0.5"}, {"muon", 3, "0.5"}};
const std::vector<Case> kOneCycleCases = {{"onecycle", 1, "0"}};
const std::vector<Case> kBf16MasterCases = {
    {"bf16master", 2, "0"}, {"bf16states", 2, "1.0"}, {"bf16states", 3, "0"}};

// The peer's TinyMuonModel.
struct TinyMuonModelImpl : torch::nn::Module {
  TinyMuonModelImpl() {
    embed = register_module("embed", torch::nn::Embedding(kVocab, kWidth));
    up = register_module("up", torch::nn::Linear(kWidth, kHidden));
    down = register_module("down", torch::nn::Linear(kHidden, kWidth));
    mix = register_module("mix",
                          torch::nn::Linear(torch::nn::LinearOptions(kWidth, kWidth).bias(false)));
    norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kWidth})));
    lm_head = register_module(
        "lm_head", torch::nn::Linear(torch::nn::LinearOptions(kWidth, kVocab).bias(false)));
  }
  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& targets) {
    torch::Tensor x = embed->forward(tokens);
    x = x + down->forward(torch::gelu(up->forward(x)));
    x = x + mix->forward(torch::tanh(x));
    torch::Tensor logits = lm_head->forward(norm->forward(x));
    return torch::cross_entropy_loss(logits.reshape({-1, kVocab}), targets.reshape({-1}));
  }
  torch::nn::Embedding embed{nullptr};
  torch::nn::Linear up{nullptr}, down{nullptr}, mix{nullptr}, lm_head{nullptr};
  torch::nn::LayerNorm norm{nullptr};
};
TORCH_MODULE(TinyMuonModel);

torch::Tensor read_raw(const fs::path& file, at::ScalarType dtype, at::IntArrayRef shape) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw std::runtime_error("missing " + file.string());
  torch::Tensor t = torch::empty(shape, dtype);
  in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
  if (in.gcount() != static_cast<std::streamsize>(t.nbytes())) {
    throw std::runtime_error("short file " + file.string());
  }
  return t;
}

fs::path deepspeed_python() {
  const char* venv = std::getenv("ZT_DS_VENV");
  const char* home = std::getenv("HOME");
  fs::path root =
      venv ? fs::path(venv) : fs::path(home ? home : "/root") / ".cache/zerotorch/venv-deepspeed";
  return root / "bin/python";
}

// Runs the peer once for every case (one process, one DeepSpeed import) into a temporary
// directory; returns it, or "" with `why` set.
fs::path run_deepspeed(const std::vector<Case>& cases, std::string* why) {
  const fs::path python = deepspeed_python();
  if (!fs::exists(python)) {
    *why = "no DeepSpeed venv at " + python.parent_path().parent_path().string() +
           " (scripts/setup_deepspeed.sh makes it)";
    return {};
  }
  const std::string probe =
      "DS_ACCELERATOR=cpu " + python.string() +
      " -c 'import deepspeed.runtime.zero.muon.original_muon' >/dev/null 2>&1";
  if (std::system(probe.c_str()) != 0) {
    *why = "the DeepSpeed venv has no deepspeed with Muon (deepspeed.runtime.zero.muon)";
    return {};
  }
  const fs::path out = fs::temp_directory_path() / ("zt_optimizer_ds_" + std::to_string(getpid()));
  fs::remove_all(out);
  std::ostringstream cmd;
  // DeepSpeed wraps muon_update in torch.compile; compiling it on a 2-core CPU takes about 100 s,
  // and the compiled kernel computes the same expression, so the peer runs DeepSpeed's code
  // eagerly (TORCHDYNAMO_DISABLE): the whole test then takes about 8 s, with the same differences.
  // The venv's bin (its ninja) goes after PATH, as in every other DeepSpeed launch here:
  // DeepSpeed's JIT ops (~/.cache/torch_extensions) are then built by one ninja, not rebuilt (about
  // 50 s) each time a ninja of another version reads the other's build log.
  cmd << "PATH=$PATH:" << python.parent_path().string()
      << " DS_ACCELERATOR=cpu TORCHDYNAMO_DISABLE=1 " << python << " " << ZT_SOURCE_DIR
      << "/tests/multirank/optim/optimizer_deepspeed_peer.py --out " << out << " --steps "
      << kSteps;
  for (const auto& [name, blocks] : kBlocks) cmd << " --blocks '" << name << "={" << blocks << "}'";
  for (const auto& c : cases) cmd << " --case " << c.name << ":" << c.stage << ":" << c.clip;
  cmd << " > " << out.string() << ".log 2>&1";
  if (std::system(cmd.str().c_str()) != 0) {
    std::ifstream log(out.string() + ".log");
    std::stringstream text;
    text << log.rdbuf();
    ADD_FAILURE() << "the DeepSpeed peer failed: " << cmd.str() << "\n" << text.str();
    return {};
  }
  return out;
}

// zerotorch on the peer's case directory; returns the largest difference from DeepSpeed after
// each step.
std::vector<double> compare_case(const fs::path& root, const Case& k) {
  const fs::path dir = root / k.dir();
  const int stage = k.stage;
  const std::string clip = k.clip;
  std::ostringstream config;
  config << R"({"train_batch_size": )" << kBatch << ", " << kBlocks.at(k.name)
         << R"(, "gradient_clipping": )" << clip << R"(, "parameter_groups": {"no_decay": []}})";
  std::vector<std::string> sets = {"zero_optimization.stage=" + std::to_string(stage)};
  zt::Config c = zt::parse_config(config.str(), zt::ConfigFormat::kJson, sets, 1, {});
  const bool bf16 = c.bf16.enabled;
  zt::EngineOptions options = zt::engine_options_from_config(c, {});
  TinyMuonModel model;
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model->named_parameters()) {
      p.value().copy_(
          read_raw(dir / "init" / (p.key() + ".bin"), torch::kFloat, p.value().sizes()));
    }
  }
  zt::Engine engine(model.ptr(), options, g_comm);
  torch::Tensor tokens = read_raw(dir / "tokens.bin", torch::kLong, {kSteps, kBatch, kSeq});
  torch::Tensor targets = read_raw(dir / "targets.bin", torch::kLong, {kSteps, kBatch, kSeq});
  std::vector<double> diffs;
  int64_t same = 0, total = 0;  // bf16: parameter elements equal to DeepSpeed's, over the steps
  for (int s = 0; s < kSteps; ++s) {
    torch::Tensor loss = engine.forward([&] { return model->forward(tokens[s], targets[s]); });
    engine.backward(loss);
    engine.step();
    double worst = 0;
    zt::Engine::GatheredParameters full(engine);
    for (auto& p : model->named_parameters()) {
      torch::Tensor want = read_raw(dir / ("step" + std::to_string(s + 1)) / (p.key() + ".bin"),
                                    torch::kFloat, p.value().sizes());
      const torch::Tensor got = p.value().detach().to(torch::kFloat);
      const double d = (got - want).abs().max().item<double>();
      if (bf16) {
        // bf16 parameters: each element equal to DeepSpeed's, or one bf16 step away where the
        // two fp32 Adam kernels (DeepSpeed's AVX-512 CPUAdam, ours) round an update that lands
        // on a rounding boundary apart, or, with bf16 moments, one update (lr) away where a
        // near-zero second moment rounded to a neighbouring bf16 value scales that element's
        // step. And nearly every element bit for bit.
        const double lr = c.optimizer->lr;
        const torch::Tensor step =
            (want.abs() * std::ldexp(1.0, -7)).clamp_min(c.bf16.bf16_optimizer_states ? lr : 1e-6);
        const int64_t far = ((got - want).abs() > step).sum().item<int64_t>();
        EXPECT_EQ(far, 0) << k.dir() << ": " << p.key() << " after step " << s + 1 << ": " << far
                          << " element(s) farther from DeepSpeed's than the bound (largest " << d
                          << ")";
        same += (got == want).sum().item<int64_t>();
        total += want.numel();
      } else {
        EXPECT_LE(d, 1e-5) << k.dir() << ": " << p.key() << " after step " << s + 1
                           << " differs from DeepSpeed's by " << d;
      }
      worst = std::max(worst, d);
    }
    diffs.push_back(worst);
  }
  if (bf16) {
    EXPECT_GE(static_cast<double>(same), 0.99 * static_cast<double>(total))
        << k.dir() << ": " << same << " of " << total << " element-steps equal DeepSpeed's";
    std::printf("%s: %lld of %lld element-steps bit for bit\n", k.dir().c_str(),
                static_cast<long long>(same), static_cast<long long>(total));
  }
  return diffs;
}

// The peer, run once for every test's cases; its directory is removed when the tests end.
struct PeerRun {
  PeerRun() {
    std::vector<Case> all = kMuonCases;
    all.insert(all.end(), kOneCycleCases.begin(), kOneCycleCases.end());
    all.insert(all.end(), kBf16MasterCases.begin(), kBf16MasterCases.end());
    out = run_deepspeed(all, &why);
  }
  ~PeerRun() {
    if (out.empty()) return;
    std::error_code ec;
    fs::remove_all(out, ec);
    fs::remove(out.string() + ".log", ec);
  }
  fs::path out;
  std::string why;  // set when the peer cannot run
};

const PeerRun& peer_run() {
  static const PeerRun run;
  return run;
}

void check_cases(const std::vector<Case>& cases) {
  ASSERT_EQ(g_comm->size(), 1) << "DeepSpeed's side runs one rank";
  const PeerRun& run = peer_run();
  if (!run.why.empty()) GTEST_SKIP() << run.why;
  ASSERT_FALSE(run.out.empty());
  const fs::path& out = run.out;
  for (const Case& k : cases) {
    const std::vector<double> diffs = compare_case(out, k);
    std::ostringstream line;
    line << k.dir() << ": max |zerotorch - DeepSpeed| per step:";
    for (double d : diffs) line << " " << d;
    std::printf("%s\n", line.str().c_str());
  }
}

TEST(OptimizerDeepSpeed, MuonTenStepsEqualDeepSpeeds) {
  check_cases(kMuonCases);
}

// DeepSpeed's OneCycle with cycle_momentum (its default) sets Adam's betas every step; a schedule
// that moved only the lr would drift from the second step on.
TEST(OptimizerDeepSpeed, OneCycleCyclesAdamsBetasAsDeepSpeed) {
  check_cases(kOneCycleCases);
}

// DeepSpeed's bf16 masters (bf16_master_weights_and_grads, with and without
// bf16_optimizer_states) under CPU offload at stages 2 and 3, clipped and not.
TEST(OptimizerDeepSpeed, Bf16MastersStepAsDeepSpeeds) {
  check_cases(kBf16MasterCases);
}

}  // namespace
