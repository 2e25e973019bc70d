// DeepSpeed checkpoints in (core/checkpoint/deepspeed_import.h), against files the real
// `deepspeed` package wrote (deepspeed_reference.py, run by this test's ctest setup at 2 ranks,
// ZeRO stages 2 and 3, fp32, torch.optim.AdamW), under mpirun -np 1 and -np 3:
//   - zero_to_fp32's model.safetensors and pytorch_model.bin read back equal to the masters
//     DeepSpeed saved, bit for bit, and load into the GPT example by name;
//   - each universal checkpoint, imported by zt-from-deepspeed, loads at this world size and at
//     every stage, and with the optimizer offloaded to CPU and NVMe: parameters and Adam's moments
//     equal DeepSpeed's bit for bit, the step is DeepSpeed's, and the next 3 losses equal
//     DeepSpeed's own next 3 within 1e-5;
//   - bad input: a missing .pt, a .pt LibTorch cannot read, a moment of the wrong shape, a
//     parameter the model lacks, another model's shapes, and the tool's exit status.
// Env (set by ctest): ZT_DS_REFERENCE, the setup's output folder; ZT_FROM_DEEPSPEED, the tool.

#include <chrono>
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

#include "base/error.h"
#include "core/checkpoint/checkpoint.h"
#include "core/checkpoint/deepspeed_import.h"
#include "core/engine.h"
#include "models/gpt/gpt_model.h"
#include "tests/support/mpi_world.h"
#include "train/load_by_name.h"
#include "weights/safetensors_reader.h"
#include "weights/state_dict_file.h"

namespace {

namespace fs = std::filesystem;
std::shared_ptr<zt::dist::Communicator>& g_comm = zt::testing::mpi_world();

// deepspeed_reference.py's model and run.
constexpr int64_t kSavedStep = 3, kResumedSteps = 3, kGlobalBatch = 6;
constexpr double kLossTolerance = 1e-5;

zt::models::GptShape twin_shape() {
  zt::models::GptShape s;
  s.n_layer = 2;
  s.n_head = 2;
  s.d_model = 32;
  s.vocab_size = 64;
  s.max_seq_len = 16;
  return s;
}

void barrier() {
  g_comm->barrier()->wait();
}

// The setup's run at DeepSpeed's ZeRO stage ds_stage (2 or 3).
std::string reference_dir(int ds_stage = 2) {
  const char* d = std::getenv("ZT_DS_REFERENCE");
  return d != nullptr ? (fs::path(d) / ("stage" + std::to_string(ds_stage))).string() : "";
}

// The setup skipped (no DeepSpeed venv) or was not run: nothing to compare against.
bool have_reference() {
  return std::getenv("ZT_DS_REFERENCE") != nullptr &&
         fs::exists(fs::path(reference_dir(2)) / "losses.json") &&
         fs::exists(fs::path(reference_dir(3)) / "losses.json");
}

#define SKIP_WITHOUT_REFERENCE()                                                           \
  if (!have_reference())                                                                   \
  GTEST_SKIP() << "no DeepSpeed reference in ZT_DS_REFERENCE (the setup test skipped: no " \
                  "DeepSpeed venv)"

std::string universal_dir(int ds_stage = 2) {
  return (fs::path(reference_dir(ds_stage)) / "ckpt" / "global_step3_universal").string();
}

// DeepSpeed's next losses after the save: {"resumed": [a, b, c], ...}.
std::vector<double> deepspeed_losses(int ds_stage) {
  std::ifstream in(fs::path(reference_dir(ds_stage)) / "losses.json");
  std::stringstream text;
  text << in.rdbuf();
  const std::string s = text.str();
  const size_t open = s.find('[', s.find("\"resumed\"")), close = s.find(']', open);
  std::vector<double> out;
  std::stringstream list(s.substr(open + 1, close - open - 1));
  for (std::string item; std::getline(list, item, ',');) out.push_back(std::stod(item));
  return out;
}

at::Tensor reference(const std::string& key, int ds_stage = 2) {
  static std::map<int, std::unique_ptr<zt::SafetensorsReader>> readers;
  auto& r = readers[ds_stage];
  if (!r) {
    r = std::make_unique<zt::SafetensorsReader>(
        (fs::path(reference_dir(ds_stage)) / "reference.safetensors").string());
  }
  return r->read(key);
}

// Both runs train on the same batches.
at::Tensor batch(const std::string& key) {
  static zt::SafetensorsReader r((fs::path(reference_dir()) / "batches.safetensors").string());
  return r.read(key);
}

std::string test_dir(const std::string& name) {
  const fs::path d = fs::path(ZT_BINARY_DIR) / "Testing" / "deepspeed_checkpoint" /
                     (name + "_np" + std::to_string(g_comm->size()));
  if (g_comm->rank() == 0) {
    fs::remove_all(d);
    fs::create_directories(d);
  }
  barrier();
  return d.string();
}

// The tool, as a user runs it: exit status, and stderr's text.
int run_tool(const std::string& args, std::string* err = nullptr) {
  const std::string err_file =
      fs::temp_directory_path() / ("zt_from_ds_err_" + std::to_string(getpid()));
  const int status = std::system(
      (std::string(std::getenv("ZT_FROM_DEEPSPEED")) + " " + args + " >/dev/null 2>" + err_file)
          .c_str());
  if (err != nullptr) {
    std::ifstream in(err_file);
    std::stringstream s;
    s << in.rdbuf();
    *err = s.str();
  }
  fs::remove(err_file);
  return status;
}

enum class Offload { kNone, kCpu, kNvme };

zt::EngineOptions engine_options(int stage, const zt::models::Gpt& model,
                                 Offload offload = Offload::kNone) {
  zt::EngineOptions o;
  o.stage = stage;
  o.stage3_param_persistence_threshold = 0;  // shard even this model's small parameters
  o.reduce_bucket_size = 5000;               // several buckets, parameters cut across ranks
  o.stage3_prefetch_bucket_size = 5000;
  // deepspeed_reference.py's optimizer block: AdamW, one group, every parameter decays.
  o.optimizer.type = zt::optim::OptimizerKind::kAdamW;
  o.hyper.lr = 1e-2;
  o.hyper.beta1 = 0.9;
  o.hyper.beta2 = 0.95;
  o.hyper.eps = 1e-8;
  o.hyper.weight_decay = 0.1;
  if (stage == 3) o.units = model->unit_names();
  if (offload != Offload::kNone) {
    o.offload_optimizer.device = zt::OffloadDevice::kCpu;
    o.optimizer.type = zt::optim::OptimizerKind::kCpuAdam;
  }
  if (offload == Offload::kNvme) {  // master and moments in swap files, streamed at the load
    const fs::path d = fs::path(ZT_BINARY_DIR) / "test_scratch" / "deepspeed_checkpoint_nvme";
    fs::create_directories(d);
    o.offload_optimizer.device = zt::OffloadDevice::kNvme;
    o.offload_optimizer.nvme_path = d.string();
    o.sub_group_size = 700;
    o.offload_optimizer.buffer_count = 3;
  }
  return o;
}

// This rank's rows of global batch `step`, the loss averaged over ranks (DeepSpeed's rows are
// split the same way over its 2 ranks; every row has the same number of labels, so the mean of
// the ranks' means is the global batch's mean).
double train_step(zt::Engine& engine, zt::models::Gpt& model, int64_t step) {
  const int world = g_comm->size(), rank = g_comm->rank();
  const int64_t micro = kGlobalBatch / world;
  const at::Tensor ids =
      batch("input_ids_" + std::to_string(step)).narrow(0, rank * micro, micro).contiguous();
  const at::Tensor labels =
      batch("labels_" + std::to_string(step)).narrow(0, rank * micro, micro).contiguous();
  const at::Tensor mask = torch::ones_like(ids);
  at::Tensor loss =
      engine.forward([&] { return zt::models::GptImpl::loss(model->forward(ids, mask), labels); });
  engine.backward(loss);
  engine.step();
  at::Tensor l = torch::full({1}, loss.item<double>(), torch::kDouble);
  g_comm->all_reduce(l)->wait();
  return l.item<double>() / world;
}

std::map<std::string, at::Tensor> full_params(zt::Engine& engine) {
  std::map<std::string, at::Tensor> out;
  zt::Engine::GatheredParameters full(engine);
  for (auto& p : engine.model()->named_parameters()) out[p.key()] = p.value().detach().clone();
  return out;
}

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

// Imports a universal checkpoint with the tool, as a user would (a stage-3 run's with the step
// and the shapes of its zero_to_fp32 weights).
std::string imported_universal(int ds_stage) {
  const std::string dir = test_dir("imported_from_stage" + std::to_string(ds_stage));
  if (g_comm->rank() == 0) {
    std::string args = universal_dir(ds_stage) + " " + dir;
    if (ds_stage == 3) {
      args += " --step " + std::to_string(kSavedStep) + " --shapes-from " +
              (fs::path(reference_dir(3)) / "fp32" / "model.safetensors").string();
    }
    std::string err;
    const int status = run_tool(args, &err);
    EXPECT_EQ(status, 0) << err;
  }
  barrier();
  return dir;
}

TEST(DeepSpeedCheckpoint, WeightsEqualTheMasters) {
  SKIP_WITHOUT_REFERENCE();
  for (const char* file : {"fp32/model.safetensors", "fp32/pytorch_model.bin"}) {
    const auto values = zt::read_state_dict_file((fs::path(reference_dir()) / file).string());
    torch::manual_seed(5);
    zt::models::Gpt model(twin_shape());
    EXPECT_EQ(values.size(), model->named_parameters().size()) << file;
    const zt::train::LoadReport report = zt::train::load_by_name(*model, values, {});
    EXPECT_TRUE(report.fresh.empty() && report.skipped.empty()) << file << ": " << report.summary();
    for (const auto& p : model->named_parameters()) {
      EXPECT_TRUE(torch::equal(p.value(), reference("fp32." + p.key())))
          << file << ": " << p.key() << " differs from DeepSpeed's master";
    }
  }
}

TEST(DeepSpeedCheckpoint, WeightsImportAsAStepZeroCheckpoint) {
  SKIP_WITHOUT_REFERENCE();
  const std::string dir = test_dir("weights");
  if (g_comm->rank() == 0) {
    ASSERT_EQ(run_tool((fs::path(reference_dir()) / "fp32").string() + " " + dir), 0);
  }
  barrier();
  torch::manual_seed(5);
  zt::models::Gpt model(twin_shape());
  zt::Engine engine(model.ptr(), engine_options(3, model), g_comm);
  zt::load_checkpoint(engine, dir);
  EXPECT_EQ(engine.global_step(), 0);
  for (const auto& [name, value] : full_params(engine))
    EXPECT_TRUE(torch::equal(value, reference("fp32." + name))) << name;
}

struct ResumeCase {
  int ds_stage;  // DeepSpeed's run
  int stage;     // ours
  Offload offload;
};

std::string case_name(const ResumeCase& c) {
  static const char* const kOffload[] = {"", "CpuOffload", "NvmeOffload"};
  return "FromStage" + std::to_string(c.ds_stage) + "ToStage" + std::to_string(c.stage) +
         kOffload[static_cast<int>(c.offload)];
}

class UniversalResume : public ::testing::TestWithParam<ResumeCase> {};

TEST_P(UniversalResume, NextLossesEqualDeepSpeeds) {
  SKIP_WITHOUT_REFERENCE();
  const int stage = GetParam().stage;
  const Offload offload = GetParam().offload;
  const int ds_stage = GetParam().ds_stage;
  const std::string dir = imported_universal(ds_stage);
  torch::manual_seed(999);  // any values: the checkpoint replaces them
  zt::models::Gpt model(twin_shape());
  zt::Engine engine(model.ptr(), engine_options(stage, model, offload), g_comm);
  zt::load_checkpoint(engine, dir);
  EXPECT_EQ(engine.global_step(), kSavedStep);

  double param_diff = 0;
  for (const auto& [name, value] : full_params(engine)) {
    param_diff = std::max(param_diff, max_abs_diff(value, reference("fp32." + name, ds_stage)));
  }
  EXPECT_EQ(param_diff, 0.0);

  // The optimizer state the engine holds, as its own checkpoint consolidates it.
  const std::string saved = test_dir("resaved_stage" + std::to_string(stage) + "_offload" +
                                     std::to_string(static_cast<int>(offload)));
  zt::save_checkpoint(engine, saved, "loaded");
  double state_diff = 0;
  for (const char* state : {"exp_avg", "exp_avg_sq"}) {
    int64_t seen = 0;
    zt::for_each_consolidated(
        saved, "loaded", state, [&](const std::string& name, const at::Tensor& v) {
          const at::Tensor want = reference(std::string(state) + "." + name, ds_stage);
          state_diff = std::max(state_diff, max_abs_diff(v, want));
          ++seen;
        });
    EXPECT_EQ(seen, static_cast<int64_t>(model->named_parameters().size())) << state;
  }
  EXPECT_EQ(state_diff, 0.0);

  const std::vector<double> want = deepspeed_losses(ds_stage);
  ASSERT_EQ(want.size(), static_cast<size_t>(kResumedSteps));
  double loss_diff = 0;
  for (int64_t s = 0; s < kResumedSteps; ++s) {
    const double loss = train_step(engine, model, kSavedStep + s);
    loss_diff = std::max(loss_diff, std::abs(loss - want[s]));
    EXPECT_NEAR(loss, want[s], kLossTolerance) << "step " << kSavedStep + s + 1;
  }
  double final_diff = 0;
  for (const auto& [name, value] : full_params(engine)) {
    final_diff = std::max(final_diff, max_abs_diff(value, reference("final." + name, ds_stage)));
  }
  // Adam divides by sqrt(v): where v is tiny, fp32 rounding differences in the gradients (another
  // summation order) grow to ~1e-5 in the parameters after 3 steps at lr 1e-2.
  EXPECT_LT(final_diff, 1e-4);
  if (g_comm->rank() == 0) {
    std::printf(
        "np %d %s: max |param - DeepSpeed| %g, max |state - DeepSpeed| %g, "
        "max |loss - DeepSpeed| over %lld steps %g, max |param - DeepSpeed| after them "
        "%g\n",
        g_comm->size(), case_name(GetParam()).c_str(), param_diff, state_diff,
        static_cast<long long>(kResumedSteps), loss_diff, final_diff);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Stages, UniversalResume,
    ::testing::Values(ResumeCase{2, 0, Offload::kNone}, ResumeCase{2, 1, Offload::kNone},
                      ResumeCase{2, 2, Offload::kNone}, ResumeCase{2, 3, Offload::kNone},
                      ResumeCase{2, 2, Offload::kCpu}, ResumeCase{2, 3, Offload::kNvme},
                      ResumeCase{3, 1, Offload::kNone}, ResumeCase{3, 3, Offload::kNone}),
    [](const auto& info) { return case_name(info.param); });

// The load time of a large import, when ZT_DS_LARGE names a checkpoint that zt-from-deepspeed
// wrote from a GPT-2-small-sized twin (vocab 50304, d_model 768, 12 layers and heads, 1024
// positions: 124M parameters); ZT_DS_LARGE_STAGE picks the stage (default 3).
TEST(DeepSpeedCheckpoint, LargeLoadTime) {
  const char* dir = std::getenv("ZT_DS_LARGE");
  if (dir == nullptr) GTEST_SKIP() << "ZT_DS_LARGE names no imported 124M checkpoint";
  const char* stage_env = std::getenv("ZT_DS_LARGE_STAGE");
  zt::models::GptShape shape;
  shape.vocab_size = 50304;
  shape.d_model = 768;
  shape.n_layer = 12;
  shape.n_head = 12;
  shape.max_seq_len = 1024;
  zt::models::Gpt model(shape);
  zt::EngineOptions o = engine_options(stage_env != nullptr ? std::atoi(stage_env) : 3, model);
  o.reduce_bucket_size = 50'000'000;
  o.stage3_prefetch_bucket_size = 50'000'000;
  zt::Engine engine(model.ptr(), o, g_comm);
  barrier();
  const auto t0 = std::chrono::steady_clock::now();
  zt::load_checkpoint(engine, dir);
  barrier();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (g_comm->rank() == 0) {
    std::printf("load of %s (%lld parameters) at %d ranks, stage %d: %.2f s\n", dir,
                static_cast<long long>(model->num_parameters()), g_comm->size(), o.stage, s);
  }
  EXPECT_EQ(engine.global_step(), 1);
}

// A copy of the universal checkpoint that `edit` breaks (rank 0 only: the library and the tool
// run in one process).
std::string broken_copy(const std::string& name) {
  const fs::path d = fs::path(ZT_BINARY_DIR) / "Testing" / "deepspeed_checkpoint" / ("bad_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  fs::copy(universal_dir(), d / "universal", fs::copy_options::recursive);
  return (d / "universal").string();
}

std::string import_error(const std::string& src) {
  try {
    zt::import_deepspeed_universal(src, src + "_out");
  } catch (const zt::Error& e) {
    return e.what();
  }
  return "";
}

TEST(DeepSpeedCheckpoint, BadFilesNameTheCulprit) {
  SKIP_WITHOUT_REFERENCE();
  if (g_comm->rank() != 0) GTEST_SKIP() << "rank 0 checks the files";
  {  // a missing moment
    const std::string src = broken_copy("missing");
    fs::remove(fs::path(src) / "zero" / "ln_f.bias" / "exp_avg_sq.pt");
    const std::string e = import_error(src);
    EXPECT_NE(e.find("zero/ln_f.bias/exp_avg_sq.pt does not exist"), std::string::npos) << e;
    EXPECT_FALSE(fs::exists(fs::path(src + "_out") / "global_step3" / "metadata.ztm"));
  }
  {  // a .pt LibTorch's unpickler cannot read (DeepSpeed's model-states file: torch.Size)
    const std::string src = broken_copy("unreadable");
    fs::copy_file(fs::path(src) / "mp_rank_00_model_states.pt",
                  fs::path(src) / "zero" / "wte.weight" / "fp32.pt",
                  fs::copy_options::overwrite_existing);
    const std::string e = import_error(src);
    EXPECT_NE(e.find("LibTorch's unpickler cannot read"), std::string::npos) << e;
    EXPECT_NE(e.find("zero/wte.weight/fp32.pt"), std::string::npos) << e;
  }
  {  // not a torch file at all
    const std::string src = broken_copy("garbage");
    std::ofstream(fs::path(src) / "zero" / "wpe.weight" / "exp_avg.pt") << "not a pickle";
    const std::string e = import_error(src);
    EXPECT_NE(e.find("zero/wpe.weight/exp_avg.pt is not a torch.save zip archive"),
              std::string::npos)
        << e;
  }
  {  // a moment shaped unlike its master
    const std::string src = broken_copy("shape");
    fs::copy_file(fs::path(src) / "zero" / "ln_f.bias" / "exp_avg.pt",
                  fs::path(src) / "zero" / "wte.weight" / "exp_avg.pt",
                  fs::copy_options::overwrite_existing);
    const std::string e = import_error(src);
    EXPECT_NE(e.find("zero/wte.weight/exp_avg.pt has shape [32], but parameter wte.weight has "
                     "[64, 32]"),
              std::string::npos)
        << e;
  }
  {  // a stage-3 run's: without the step, then without a shape
    std::string e = import_error(universal_dir(3));
    EXPECT_NE(e.find("has no step.pt (a ZeRO stage-3 run's"), std::string::npos) << e;
    zt::DeepSpeedImportOptions o;
    o.step = kSavedStep;
    for (const auto& [name, t] : zt::read_state_dict_file(
             (fs::path(reference_dir(3)) / "fp32" / "model.safetensors").string()))
      if (name != "ln_f.bias") o.shapes[name] = t.sizes().vec();
    try {
      zt::import_deepspeed_universal(universal_dir(3), broken_copy("shapes") + "_out", o);
      e.clear();
    } catch (const zt::Error& err) {
      e = err.what();
    }
    EXPECT_NE(e.find("ln_f.bias has no step.pt, so its values are flat, and no shape was given"),
              std::string::npos)
        << e;
  }
  {  // the tool: non-zero exit, one line naming the culprit
    std::string err;
    const int status = run_tool("/nonexistent/global_step3_universal /tmp/zt_unused", &err);
    EXPECT_NE(status, 0);
    EXPECT_NE(err.find("/nonexistent/global_step3_universal"), std::string::npos) << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  }
}

TEST(DeepSpeedCheckpoint, AnotherModelIsRefusedByName) {
  SKIP_WITHOUT_REFERENCE();
  // A parameter the model lacks (renamed in the copy) and a model of another width.
  const fs::path root = fs::path(ZT_BINARY_DIR) / "Testing" / "deepspeed_checkpoint" /
                        ("unknown_np" + std::to_string(g_comm->size()));
  if (g_comm->rank() == 0) {
    fs::remove_all(root);
    fs::create_directories(root);
    fs::copy(universal_dir(), root / "universal", fs::copy_options::recursive);
    fs::rename(root / "universal" / "zero" / "ln_f.bias",
               root / "universal" / "zero" / "ln_g.bias");
    zt::import_deepspeed_universal((root / "universal").string(), (root / "renamed").string());
    zt::import_deepspeed_universal(universal_dir(), (root / "good").string());
  }
  barrier();
  {
    zt::models::Gpt model(twin_shape());
    zt::Engine engine(model.ptr(), engine_options(2, model), g_comm);
    try {
      zt::load_checkpoint(engine, (root / "renamed").string());
      ADD_FAILURE() << "a checkpoint with parameter ln_g.bias loaded";
    } catch (const zt::Error& e) {
      EXPECT_NE(std::string(e.what()).find("no parameter ln_f.bias"), std::string::npos)
          << e.what();
    }
  }
  {
    zt::models::GptShape wide = twin_shape();
    wide.d_model = 48;
    zt::models::Gpt model(wide);
    zt::Engine engine(model.ptr(), engine_options(2, model), g_comm);
    try {
      zt::load_checkpoint(engine, (root / "good").string());
      ADD_FAILURE() << "a checkpoint of width 32 loaded into width 48";
    } catch (const zt::Error& e) {
      EXPECT_NE(std::string(e.what()).find("parameter wte.weight has shape [64, 32] there, "
                                           "[64, 48] in the model"),
                std::string::npos)
          << e.what();
    }
  }
  // A parameter the model does not have, besides all those it has (a copied folder).
  if (g_comm->rank() == 0) {
    fs::copy(root / "universal" / "zero" / "ln_g.bias", root / "universal" / "zero" / "ln_f.bias",
             fs::copy_options::recursive);
    zt::import_deepspeed_universal((root / "universal").string(), (root / "extra").string());
  }
  barrier();
  zt::models::Gpt model(twin_shape());
  zt::Engine engine(model.ptr(), engine_options(2, model), g_comm);
  try {
    zt::load_checkpoint(engine, (root / "extra").string());
    ADD_FAILURE() << "a checkpoint with parameter ln_g.bias loaded";
  } catch (const zt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("has parameter ln_g.bias, which the model does not have"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
