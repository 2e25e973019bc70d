// Checkpoints (docs/DESIGN.md, Checkpoint), under mpirun -np 2:
//   - exact resume: 10 steps == 4 steps, save, new engine, load, 6 steps (bit-identical
//     parameters and losses), stages 0-3;
//   - bad input: each broken checkpoint throws its own error naming the file, and the engine is
//     left untouched;
//   - retention: keep_last;
//   - fp16/bf16: exact resume restores the loss scaler (scale, counters) exactly;
//   - save_16bit_model: stage 3 gathers one unit at a time; the file holds the 16-bit params.
// CrossRun.* run only from checkpoint_cross_run.sh (env ZT_CKPT_DIR set): one mpirun saves, a
// later one with another -np and stage loads and checks the values bit-identically.

#include "core/checkpoint/checkpoint.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <unistd.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "base/error.h"
#include "core/checkpoint/async_checkpoint.h"
#include "core/checkpoint/model_export.h"
#include "core/engine.h"
#include "parallel/dist.h"
#include "tests/multirank/core/engine/test_models.h"
#include "tests/support/mpi_world.h"

namespace {

namespace fs = std::filesystem;
std::shared_ptr<zt::dist::Communicator>& g_comm = zt::testing::mpi_world();
constexpr int64_t kGlobalBatch = 48;

enum class ModelKind { kMlp, kTransformer };

std::shared_ptr<torch::nn::Module> make_model(ModelKind kind, int seed = 1234) {
  torch::manual_seed(seed);
  if (kind == ModelKind::kMlp) return zt::testing::Mlp().ptr();
  return zt::testing::TinyTransformer().ptr();
}

torch::Tensor run_model(torch::nn::Module& m, ModelKind kind, const torch::Tensor& x) {
  if (kind == ModelKind::kMlp) return static_cast<zt::testing::MlpImpl&>(m).forward(x);
  return static_cast<zt::testing::TinyTransformerImpl&>(m).forward(x);
}

zt::EngineOptions engine_options(ModelKind kind, int stage,
                                 torch::ScalarType dtype = torch::kFloat) {
  zt::EngineOptions o;
  o.stage = stage;
  // Stage 3 shards every buffer, however small (DeepSpeed's default threshold would keep
  // this test's small buffers gathered).
  o.stage3_param_persistence_threshold = 0;
  o.compute_dtype = dtype;
  // fp16: a start scale that overflows for the first steps and a short window that probes
  // upward again, so the scaler's state changes throughout a 10-step run.
  o.fp16.initial_scale_power = 20;
  o.fp16.loss_scale_window = 2;
  o.fp16.hysteresis = 2;
  o.reduce_bucket_size = 97;  // several buckets, each padded
  o.stage3_prefetch_bucket_size = 200;
  o.optimizer.type = zt::optim::OptimizerKind::kAdamW;
  o.hyper.lr = 1e-2;
  o.hyper.weight_decay = 0.01;
  o.param_groups.no_decay_patterns = {"bias", "ln"};
  if (kind == ModelKind::kTransformer) o.units = {"block0", "block1"};
  return o;
}

void barrier() {
  g_comm->barrier()->wait();
}

// One optimizer step on global batch `step` (data seeded by the step, so a resumed run sees the
// same batches); returns the mean loss over ranks.
double train_step(zt::Engine& engine, ModelKind kind, int step) {
  torch::manual_seed(100 + step);
  torch::Tensor x = kind == ModelKind::kMlp ? torch::randn({kGlobalBatch, 7})
                                            : torch::randn({kGlobalBatch, 6, 5});
  torch::Tensor y = torch::randn({kGlobalBatch, 3});
  const int world = g_comm->size(), rank = g_comm->rank();
  const int64_t micro = kGlobalBatch / world;
  torch::Tensor xs = x.narrow(0, rank * micro, micro), ys = y.narrow(0, rank * micro, micro);
  auto model = engine.model();
  const torch::ScalarType dtype = engine.options().compute_dtype;
  torch::Tensor loss = engine.forward(
      [&] { return torch::mse_loss(run_model(*model, kind, xs.to(dtype)).to(torch::kFloat), ys); });
  engine.backward(loss);
  engine.step();
  torch::Tensor l = torch::full({1}, loss.item<double>(), torch::kDouble);
  g_comm->all_reduce(l)->wait();
  return l.item<double>() / world;
}

std::map<std::string, torch::Tensor> full_params(zt::Engine& engine) {
  std::map<std::string, torch::Tensor> out;
  zt::Engine::GatheredParameters full(engine);
  for (auto& p : engine.model()->named_parameters()) out[p.key()] = p.value().detach().clone();
  return out;
}

std::string test_dir(const std::string& name) {
  const fs::path d = fs::path(ZT_BINARY_DIR) / "Testing" / "checkpoint" / name;
  if (g_comm->rank() == 0) {
    fs::remove_all(d);
    fs::create_directories(d);
  }
  barrier();
  return d.string();
}

struct ResumeCase {
  ModelKind kind;
  int stage;
  torch::ScalarType dtype = torch::kFloat;
};

class ExactResume : public ::testing::TestWithParam<ResumeCase> {};

TEST_P(ExactResume, TenStepsEqualFourSaveLoadSix) {
  const auto [kind, stage, dtype] = GetParam();
  const std::string dir = test_dir("exact_" + std::to_string(int(kind)) + "_" +
                                   std::to_string(stage) + "_" + c10::toString(dtype));
  const zt::EngineOptions options = engine_options(kind, stage, dtype);
  std::vector<double> want, got, want_scales, got_scales;  // loss, loss scale after each step
  std::map<std::string, torch::Tensor> want_params;
  std::map<std::string, double> want_scaler_at4, want_scaler;
  int64_t want_skipped = 0, want_skipped_at4 = 0;
  {
    zt::Engine engine(make_model(kind), options, g_comm);
    for (int s = 0; s < 10; ++s) {
      want.push_back(train_step(engine, kind, s));
      want_scales.push_back(engine.loss_scale());
      if (s == 3 && engine.loss_scaler()) want_scaler_at4 = engine.loss_scaler()->state();
      if (s == 3) want_skipped_at4 = engine.skipped_steps();
    }
    want_params = full_params(engine);
    if (engine.loss_scaler()) want_scaler = engine.loss_scaler()->state();
    want_skipped = engine.skipped_steps();
  }
  if (dtype == torch::kHalf) {
    // The case only means something if the scale moved and steps were both skipped and taken
    // on each side of the save.
    EXPECT_GT(want_skipped_at4, 0);
    EXPECT_LT(want_skipped, 10);
    EXPECT_TRUE(std::any_of(want_scales.begin() + 4, want_scales.end(),
                            [&](double v) { return v != want_scales[3]; }));
  }
  {
    zt::Engine engine(make_model(kind), options, g_comm);
    for (int s = 0; s < 4; ++s) {
      got.push_back(train_step(engine, kind, s));
      got_scales.push_back(engine.loss_scale());
    }
    zt::save_checkpoint(engine, dir, "step4",
                        {{"sampler", "epoch=0 pos=" + std::to_string(g_comm->rank())}});
  }
  // Another initialisation: only the checkpoint can make the runs agree.
  zt::Engine engine(make_model(kind, 999), options, g_comm);
  zt::ClientState client = zt::load_checkpoint(engine, dir);
  EXPECT_EQ(client["sampler"], "epoch=0 pos=" + std::to_string(g_comm->rank()));
  EXPECT_EQ(engine.global_step(), 4);
  EXPECT_EQ(engine.skipped_steps(), want_skipped_at4);
  if (engine.loss_scaler()) {
    EXPECT_EQ(engine.loss_scaler()->state(), want_scaler_at4);
  }
  for (int s = 4; s < 10; ++s) {
    got.push_back(train_step(engine, kind, s));
    got_scales.push_back(engine.loss_scale());
  }
  EXPECT_EQ(got_scales, want_scales);
  EXPECT_EQ(engine.skipped_steps(), want_skipped);
  if (engine.loss_scaler()) {
    EXPECT_EQ(engine.loss_scaler()->state(), want_scaler);
  }
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], want[i]) << "loss of step " << i;
  for (auto& [name, p] : full_params(engine))
    EXPECT_TRUE(torch::equal(p, want_params[name])) << name << " differs after resume";
}

INSTANTIATE_TEST_SUITE_P(
    Stages, ExactResume,
    ::testing::Values(ResumeCase{ModelKind::kMlp, 0}, ResumeCase{ModelKind::kMlp, 1},
                      ResumeCase{ModelKind::kMlp, 2}, ResumeCase{ModelKind::kMlp, 3},
                      ResumeCase{ModelKind::kTransformer, 1},
                      ResumeCase{ModelKind::kTransformer, 3},
                      ResumeCase{ModelKind::kMlp, 2, torch::kHalf},
                      ResumeCase{ModelKind::kTransformer, 3, torch::kHalf},
                      ResumeCase{ModelKind::kTransformer, 1, torch::kBFloat16}));

// save_16bit_model: at stage 3 with gathering on, one unit at a time; the file appears on disk
// whole (checked by Python in checkpoint_cross_run.sh); off, nothing is written.
TEST(Save16bitModel, Stage3GathersUnitByUnit) {
  const std::string dir = test_dir("save16");
  zt::EngineOptions options = engine_options(ModelKind::kTransformer, 3, torch::kBFloat16);
  {
    zt::Engine engine(make_model(ModelKind::kTransformer), options, g_comm);
    train_step(engine, ModelKind::kTransformer, 0);
    EXPECT_FALSE(zt::save_16bit_model(engine, dir + "/off.safetensors"));
    EXPECT_FALSE(fs::exists(dir + "/off.safetensors"));
  }
  options.stage3_gather_16bit_weights_on_model_save = true;
  zt::Engine engine(make_model(ModelKind::kTransformer), options, g_comm);
  for (int s = 0; s < 3; ++s) train_step(engine, ModelKind::kTransformer, s);
  int64_t model_bytes = 0, max_gathered = 0;
  size_t visited = 0;
  for (const auto& [name, p] : engine.named_parameters_by_unit())
    model_bytes += p.numel() * p.element_size();
  engine.for_each_full_parameter([&](const std::string&, const at::Tensor& p) {
    EXPECT_EQ(p.scalar_type(), torch::kBFloat16);
    EXPECT_TRUE(torch::isfinite(p).all().item<bool>());
    max_gathered = std::max(max_gathered, engine.memory().gathered_param_bytes);
    ++visited;
  });
  EXPECT_EQ(visited, engine.named_parameters_by_unit().size());
  EXPECT_GT(max_gathered, 0);
  EXPECT_LT(max_gathered, model_bytes) << "the whole model was gathered at once";
  EXPECT_EQ(engine.memory().gathered_param_bytes, 0) << "units left gathered";
  const std::string path = dir + "/model.safetensors";
  ASSERT_TRUE(zt::save_16bit_model(engine, path));
  // Header length + header + every parameter's 16-bit bytes.
  uint64_t header = 0;
  std::ifstream(path, std::ios::binary).read(reinterpret_cast<char*>(&header), 8);
  EXPECT_EQ(fs::file_size(path), 8 + header + static_cast<uint64_t>(model_bytes));
  // The 16-bit parameters are the fp32 masters cast to bf16.
  zt::save_checkpoint(engine, dir, "c");
  auto params = full_params(engine);
  zt::for_each_consolidated(dir, "c", "master", [&](const std::string& n, const at::Tensor& t) {
    EXPECT_TRUE(torch::equal(params.at(n), t.to(torch::kBFloat16))) << n;
  });
}

// Saves a 2-step MLP checkpoint under dir/tag, applies `damage` on rank 0, then expects every
// rank's load to throw an error containing `expect`, with the engine unchanged.
void expect_load_error(const std::string& name, const std::function<void(const fs::path&)>& damage,
                       const std::string& expect, ModelKind load_kind = ModelKind::kMlp,
                       std::string load_tag = "t") {
  const std::string dir = test_dir("bad_" + name);
  {
    zt::Engine engine(make_model(ModelKind::kMlp), engine_options(ModelKind::kMlp, 1), g_comm);
    for (int s = 0; s < 2; ++s) train_step(engine, ModelKind::kMlp, s);
    zt::save_checkpoint(engine, dir, "t");
  }
  if (g_comm->rank() == 0) damage(fs::path(dir));
  barrier();
  zt::Engine engine(make_model(load_kind, 7), engine_options(load_kind, 1), g_comm);
  auto before = full_params(engine);
  try {
    zt::load_checkpoint(engine, dir, load_tag);
    ADD_FAILURE() << name << ": load did not throw";
  } catch (const zt::Error& e) {
    EXPECT_NE(std::string(e.what()).find(expect), std::string::npos)
        << name << ": got '" << e.what() << "', want it to contain '" << expect << "'";
  }
  for (auto& [n, p] : full_params(engine))
    EXPECT_TRUE(torch::equal(p, before[n])) << name << ": " << n << " changed by a failed load";
  EXPECT_EQ(engine.global_step(), 0);
}

void flip_byte(const fs::path& file, std::streamoff at) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(at);
  char c;
  f.get(c);
  f.seekp(at);
  f.put(static_cast<char>(c ^ 0x10));
}

TEST(CheckpointBadInput, EachErrorNamesFileAndProblem) {
  expect_load_error(
      "nodir", [](const fs::path& d) { fs::remove_all(d); }, "does not exist");
  expect_load_error(
      "notag", [](const fs::path&) {}, "checkpoint tag nope does not exist", ModelKind::kMlp,
      "nope");
  expect_load_error(
      "nolatest", [](const fs::path& d) { fs::remove(d / "latest"); }, "has no latest file",
      ModelKind::kMlp, "");
  expect_load_error(
      "missing_shard", [](const fs::path& d) { fs::remove(d / "t" / "shard_r00001.zts"); },
      "shard_r00001.zts is missing");
  expect_load_error(
      "truncated",
      [](const fs::path& d) {
        const fs::path f = d / "t" / "shard_r00001.zts";
        fs::resize_file(f, fs::file_size(f) - 5);
      },
      "shard_r00001.zts is truncated");
  expect_load_error(
      "bitflip",
      [](const fs::path& d) {
        const fs::path f = d / "t" / "shard_r00000.zts";
        flip_byte(f, fs::file_size(f) / 2);
      },
      "shard_r00000.zts is corrupt: checksum mismatch");
  expect_load_error(
      "incomplete", [](const fs::path& d) { fs::remove(d / "t" / "metadata.ztm"); },
      "is incomplete");
  expect_load_error(
      "other_model", [](const fs::path&) {}, "is from another model", ModelKind::kTransformer);
}

TEST(CheckpointRetention, KeepLastDropsOlderCompleteTags) {
  const std::string dir = test_dir("retention");
  zt::Engine engine(make_model(ModelKind::kMlp), engine_options(ModelKind::kMlp, 2), g_comm);
  zt::CheckpointOptions opts;
  opts.keep_last = 2;
  for (int s = 0; s < 3; ++s) {
    train_step(engine, ModelKind::kMlp, s);
    zt::save_checkpoint(engine, dir, "global_step" + std::to_string(s + 1), {}, opts);
  }
  EXPECT_FALSE(fs::exists(fs::path(dir) / "global_step1"));
  EXPECT_TRUE(fs::exists(fs::path(dir) / "global_step2" / "metadata.ztm"));
  EXPECT_TRUE(fs::exists(fs::path(dir) / "global_step3" / "metadata.ztm"));
  EXPECT_EQ(zt::latest_checkpoint_tag(dir), "global_step3");
  zt::Engine fresh(make_model(ModelKind::kMlp, 5), engine_options(ModelKind::kMlp, 2), g_comm);
  zt::load_checkpoint(fresh, dir);
  EXPECT_EQ(fresh.global_step(), 3);
}

// ---- cross-run (driven by checkpoint_cross_run.sh) ----

std::string env(const char* name, const std::string& fallback = "") {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

// The C++ side of check_safetensors.py: ref/index.txt lists `name d0 d1 ...`, ref/<name>.bin
// holds the raw values in the tensor's own dtype.
void write_reference(const fs::path& ref, const std::map<std::string, torch::Tensor>& params) {
  fs::create_directories(ref);
  std::ofstream index(ref / "index.txt");
  for (const auto& [name, p] : params) {
    index << name;
    for (int64_t d : p.sizes()) index << ' ' << d;
    index << '\n';
    torch::Tensor c = p.contiguous();
    std::ofstream(ref / (name + ".bin"), std::ios::binary)
        .write(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
  }
}

// ZT_CKPT_DIR, ZT_CKPT_STAGE, ZT_CKPT_TAG (save) / ZT_CKPT_LOAD_TAG + ZT_CKPT_RESAVE_TAG (load).
TEST(CrossRun, Save) {
  const std::string dir = env("ZT_CKPT_DIR");
  if (dir.empty()) GTEST_SKIP() << "run by checkpoint_cross_run.sh";
  const int stage = std::stoi(env("ZT_CKPT_STAGE", "1"));
  zt::Engine engine(make_model(ModelKind::kTransformer),
                    engine_options(ModelKind::kTransformer, stage), g_comm);
  for (int s = 0; s < 4; ++s) train_step(engine, ModelKind::kTransformer, s);
  auto params = full_params(engine);
  // For the kill -9 test: the script kills these processes while they pause in the save.
  std::ofstream(fs::path(dir) / ("pid_r" + std::to_string(g_comm->rank()))) << getpid() << "\n";
  zt::save_checkpoint(engine, dir, env("ZT_CKPT_TAG", "a"));
  if (g_comm->rank() == 0 && env("ZT_CKPT_TAG", "a") == "a") {
    write_reference(fs::path(dir) / "ref", params);  // fp32 training: the fp32 values
  }
}

// ZT_CKPT_DIR: a bf16 stage-3 model saved by save_16bit_model as m16.safetensors, with the
// reference bits in ref16/ (index.txt: name dims; <name>.bin: raw bf16) for check_safetensors.py.
TEST(CrossRun, Save16bit) {
  const std::string dir = env("ZT_CKPT_DIR");
  if (dir.empty()) GTEST_SKIP() << "run by checkpoint_cross_run.sh";
  zt::EngineOptions options = engine_options(ModelKind::kTransformer, 3, torch::kBFloat16);
  options.stage3_gather_16bit_weights_on_model_save = true;
  zt::Engine engine(make_model(ModelKind::kTransformer), options, g_comm);
  for (int s = 0; s < 3; ++s) train_step(engine, ModelKind::kTransformer, s);
  ASSERT_TRUE(zt::save_16bit_model(engine, dir + "/m16.safetensors"));
  auto params = full_params(engine);
  if (g_comm->rank() == 0) write_reference(fs::path(dir) / "ref16", params);
}

TEST(CrossRun, LoadReshardedAndContinue) {
  const std::string dir = env("ZT_CKPT_DIR");
  if (dir.empty()) GTEST_SKIP() << "run by checkpoint_cross_run.sh";
  const int stage = std::stoi(env("ZT_CKPT_STAGE", "1"));
  const std::string tag = env("ZT_CKPT_LOAD_TAG"), resave = env("ZT_CKPT_RESAVE_TAG");
  zt::Engine engine(make_model(ModelKind::kTransformer, 4321),
                    engine_options(ModelKind::kTransformer, stage), g_comm);
  zt::load_checkpoint(engine, dir, tag);
  const int64_t step = engine.global_step();
  EXPECT_GT(step, 0);
  // Parameters equal the saved fp32 masters bit-identically (fp32 training: params are masters).
  auto params = full_params(engine);
  size_t seen = 0;
  zt::for_each_consolidated(dir, tag, "master", [&](const std::string& n, const at::Tensor& t) {
    ++seen;
    EXPECT_TRUE(torch::equal(params.at(n), t)) << n << " differs from the checkpoint";
  });
  EXPECT_EQ(seen, params.size());
  // Saving again at this world size and stage reproduces every saved tensor bit for bit.
  if (!resave.empty()) {
    zt::save_checkpoint(engine, dir, resave);
    for (std::string what : {"master", "exp_avg", "exp_avg_sq"}) {
      std::map<std::string, torch::Tensor> a;
      zt::for_each_consolidated(dir, tag, what,
                                [&](const std::string& n, const at::Tensor& t) { a[n] = t; });
      zt::for_each_consolidated(dir, resave, what, [&](const std::string& n, const at::Tensor& t) {
        EXPECT_TRUE(torch::equal(a.at(n), t)) << what << " of " << n << " changed by resharding";
      });
    }
  }
  // Training continues.
  for (int s = 0; s < 2; ++s) {
    double loss = train_step(engine, ModelKind::kTransformer, static_cast<int>(step) + s);
    EXPECT_TRUE(std::isfinite(loss));
  }
  EXPECT_EQ(engine.global_step(), step + 2);
}

// CrossRun.SaveAsync (async_checkpoint_kill.sh): a background save of ZT_CKPT_TAG while training
// goes on; after two more steps each rank writes continued_r<rank>, then waits for the write
// (which the script holds under its temporary name until it kills the ranks).
TEST(CrossRun, SaveAsync) {
  const std::string dir = env("ZT_CKPT_DIR");
  if (dir.empty()) GTEST_SKIP() << "run by async_checkpoint_kill.sh";
  const int stage = std::stoi(env("ZT_CKPT_STAGE", "1"));
  zt::Engine engine(make_model(ModelKind::kTransformer),
                    engine_options(ModelKind::kTransformer, stage), g_comm);
  for (int s = 0; s < 4; ++s) train_step(engine, ModelKind::kTransformer, s);
  std::ofstream(fs::path(dir) / ("pid_r" + std::to_string(g_comm->rank()))) << getpid() << "\n";
  zt::AsyncCheckpointer saver(engine);
  saver.save(dir, env("ZT_CKPT_TAG", "k"));
  for (int s = 4; s < 6; ++s) {
    train_step(engine, ModelKind::kTransformer, s);
    EXPECT_FALSE(saver.poll());
  }
  std::ofstream(fs::path(dir) / ("continued_r" + std::to_string(g_comm->rank()))) << "\n";
  saver.wait();
}

// ---- background saves (checkpoint.writer.decoupled) ----

// Every file of two tag directories, byte for byte.
void expect_same_files(const fs::path& a, const fs::path& b) {
  size_t n = 0;
  for (const auto& f : fs::directory_iterator(a)) {
    ++n;
    std::ifstream fa(f.path(), std::ios::binary), fb(b / f.path().filename(), std::ios::binary);
    ASSERT_TRUE(fb.good()) << f.path().filename() << " missing from " << b;
    const std::string ca((std::istreambuf_iterator<char>(fa)), {});
    const std::string cb((std::istreambuf_iterator<char>(fb)), {});
    EXPECT_TRUE(ca == cb) << f.path().filename() << " differs between " << a << " and " << b;
  }
  EXPECT_EQ(n, static_cast<size_t>(std::distance(fs::directory_iterator(b), {})));
  EXPECT_GT(n, 1u);
}

std::string read_latest(const std::string& dir) {
  return fs::exists(fs::path(dir) / "latest") ? zt::latest_checkpoint_tag(dir) : "";
}

// Holds each background write back for one scope: its shard file is created that many seconds
// late (tests/support/hold_shard_writes.cpp, preloaded by the _async tests), so the write, its
// reads of NVMe swap files included, is still in flight while the test trains or checks.
struct PauseWrites {
  explicit PauseWrites(int seconds) {
    ::setenv("ZT_TEST_HOLD_SHARD_CREATE_S", std::to_string(seconds).c_str(), 1);
  }
  ~PauseWrites() { ::unsetenv("ZT_TEST_HOLD_SHARD_CREATE_S"); }
};

class AsyncCheckpointFiles : public ::testing::TestWithParam<ResumeCase> {};

// The background writer writes what the synchronous save writes: every shard and the metadata
// are the same bytes (so everything that loads one loads the other).
TEST_P(AsyncCheckpointFiles, SameBytesAsTheSynchronousSave) {
  const auto [kind, stage, dtype] = GetParam();
  const std::string name = "async_files_" + std::to_string(int(kind)) + "_" +
                           std::to_string(stage) + "_" + c10::toString(dtype);
  const std::string sync_dir = test_dir(name + "_sync"), async_dir = test_dir(name + "_async");
  zt::Engine engine(make_model(kind), engine_options(kind, stage, dtype), g_comm);
  for (int s = 0; s < 3; ++s) train_step(engine, kind, s);
  const zt::ClientState client{{"sampler", "epoch=0 pos=" + std::to_string(g_comm->rank())}};
  zt::save_checkpoint(engine, sync_dir, "t", client);
  zt::AsyncCheckpointer saver(engine);
  saver.save(async_dir, "t", client);
  saver.wait();
  EXPECT_FALSE(saver.in_flight());
  EXPECT_EQ(read_latest(async_dir), "t");
  if (g_comm->rank() == 0) expect_same_files(fs::path(sync_dir) / "t", fs::path(async_dir) / "t");
  barrier();
}

INSTANTIATE_TEST_SUITE_P(Stages, AsyncCheckpointFiles,
                         ::testing::Values(ResumeCase{ModelKind::kMlp, 0},
                                           ResumeCase{ModelKind::kMlp, 1},
                                           ResumeCase{ModelKind::kMlp, 2},
                                           ResumeCase{ModelKind::kMlp, 3},
                                           ResumeCase{ModelKind::kTransformer, 3},
                                           ResumeCase{ModelKind::kTransformer, 1, torch::kBFloat16},
                                           ResumeCase{ModelKind::kMlp, 2, torch::kHalf}));

// Training goes on while the write is in flight; the checkpoint holds the state of the step it
// was taken at, not of the steps trained during the write: 10 steps straight equal 4 steps, a
// background save, 6 more steps (discarded), then a new engine loading the save and training 6.
TEST(AsyncCheckpoint, TrainingGoesOnAndTheCheckpointIsTheSaveStep) {
  const ModelKind kind = ModelKind::kTransformer;
  const zt::EngineOptions options = engine_options(kind, 3);
  const std::string dir = test_dir("async_resume");
  std::vector<double> want, got;
  std::map<std::string, torch::Tensor> want_params;
  {
    zt::Engine engine(make_model(kind), options, g_comm);
    for (int s = 0; s < 10; ++s) want.push_back(train_step(engine, kind, s));
    want_params = full_params(engine);
  }
  {
    zt::Engine engine(make_model(kind), options, g_comm);
    for (int s = 0; s < 4; ++s) got.push_back(train_step(engine, kind, s));
    zt::AsyncCheckpointer saver(engine);
    {
      PauseWrites pause(2);
      saver.save(dir, "step4", {{"sampler", "at4"}});
      // The save returned before its write (held back 2 s) ended: nothing is committed yet.
      EXPECT_TRUE(saver.in_flight());
      EXPECT_LT(saver.last_stall_seconds(), 1.0);
      EXPECT_EQ(read_latest(dir), "");
      EXPECT_FALSE(fs::exists(fs::path(dir) / "step4" / "metadata.ztm"));
      for (int s = 4; s < 10; ++s) {
        EXPECT_EQ(train_step(engine, kind, s), want[static_cast<size_t>(s)]);
        saver.poll();
      }
      saver.wait();
    }
    EXPECT_GE(saver.last_write_seconds(), 2.0);
    EXPECT_EQ(read_latest(dir), "step4");
  }
  zt::Engine engine(make_model(kind, 999), options, g_comm);
  zt::ClientState client = zt::load_checkpoint(engine, dir);
  EXPECT_EQ(client["sampler"], "at4");
  EXPECT_EQ(engine.global_step(), 4);
  for (int s = 4; s < 10; ++s) got.push_back(train_step(engine, kind, s));
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], want[i]) << "loss of step " << i;
  for (auto& [name, p] : full_params(engine))
    EXPECT_TRUE(torch::equal(p, want_params[name])) << name << " differs after resume";
}

// A second save first finishes the one in flight: it is committed before the second starts, and
// each becomes `latest` in turn; keep_last counts them like synchronous saves.
TEST(AsyncCheckpoint, AtMostOneSaveInFlight) {
  const ModelKind kind = ModelKind::kMlp;
  const std::string dir = test_dir("async_one_in_flight");
  zt::Engine engine(make_model(kind), engine_options(kind, 2), g_comm);
  zt::AsyncCheckpointer saver(engine);
  zt::CheckpointOptions keep2;
  keep2.keep_last = 2;
  PauseWrites pause(1);
  train_step(engine, kind, 0);
  saver.save(dir, "a", {}, keep2);
  train_step(engine, kind, 1);
  saver.save(dir, "b", {}, keep2);  // waits for "a"
  EXPECT_TRUE(fs::exists(fs::path(dir) / "a" / "metadata.ztm"));
  EXPECT_EQ(read_latest(dir), "a");
  EXPECT_FALSE(fs::exists(fs::path(dir) / "b" / "metadata.ztm"));
  train_step(engine, kind, 2);
  saver.save(dir, "c", {}, keep2);
  saver.wait();
  EXPECT_EQ(read_latest(dir), "c");
  EXPECT_EQ(zt::complete_checkpoint_tags(dir), (std::vector<std::string>{"c", "b"}));
}

// A write that fails (here: its tag directory removed under it) throws on every rank at the
// next poll, naming the tag, and `latest` still names the previous checkpoint, which loads.
TEST(AsyncCheckpoint, FailedWriteThrowsEverywhereAndKeepsLatest) {
  const ModelKind kind = ModelKind::kMlp;
  const std::string dir = test_dir("async_failed");
  zt::Engine engine(make_model(kind), engine_options(kind, 1), g_comm);
  train_step(engine, kind, 0);
  zt::save_checkpoint(engine, dir, "good");
  train_step(engine, kind, 1);
  zt::AsyncCheckpointer saver(engine);
  {
    PauseWrites pause(1);
    saver.save(dir, "bad");
    barrier();
    if (g_comm->rank() == 0) fs::remove_all(fs::path(dir) / "bad");
    barrier();
    try {
      saver.wait();
      ADD_FAILURE() << "a failed background write was not reported";
    } catch (const zt::Error& e) {
      EXPECT_NE(std::string(e.what()).find("background write of bad failed"), std::string::npos)
          << e.what();
    }
  }
  EXPECT_FALSE(saver.in_flight());
  EXPECT_EQ(read_latest(dir), "good");
  zt::Engine fresh(make_model(kind, 999), engine_options(kind, 1), g_comm);
  zt::load_checkpoint(fresh, dir);
  EXPECT_EQ(fresh.global_step(), 1);
}

}  // namespace

// offload_optimizer.device nvme (core/zero/nvme_optimizer.h): master and Adam state stream
// between the swap files and the checkpoint chunk by chunk (at stage 3 with the parameter shards on
// NVMe as well: a load writes them back to their files). Resuming gives the same losses and
// parameters bit for bit; the checkpoint is the same format as CPU offload's, so it loads there
// (and CPU offload's loads with NVMe); another bucket layout takes the resharding path.
namespace {
namespace nvme_resume {

zt::EngineOptions nvme_options(ModelKind kind, int stage, torch::ScalarType dtype, bool nvme) {
  zt::EngineOptions o = engine_options(kind, stage, dtype);
  o.offload_optimizer.device = zt::OffloadDevice::kCpu;
  o.optimizer.type = zt::optim::OptimizerKind::kCpuAdam;
  if (nvme) {
    const fs::path d = fs::path(ZT_BINARY_DIR) / "test_scratch" / "nvme_checkpoint";
    fs::create_directories(d);
    o.offload_optimizer.device = zt::OffloadDevice::kNvme;
    o.offload_optimizer.nvme_path = d.string();
    o.sub_group_size = 33;
    o.offload_optimizer.buffer_count = 3;
    o.offload_optimizer.pipeline_read = o.offload_optimizer.pipeline_write = true;
    if (stage == 3) {  // the 16-bit parameter shards in files too (core/zero/nvme_params.h)
      o.offload_param.device = zt::OffloadDevice::kNvme;
      o.offload_param.nvme_path = d.string();
      o.offload_param.max_in_cpu = 0;
      o.offload_param.buffer_count = 2;
    }
  }
  return o;
}

struct Run {
  std::vector<double> losses;
  std::map<std::string, torch::Tensor> params;
};

// Loads `tag` from dir into a fresh engine (another initialisation) and trains steps 4..9.
Run resume(ModelKind kind, const zt::EngineOptions& o, const std::string& dir,
           const std::string& tag) {
  zt::Engine engine(make_model(kind, 999), o, g_comm);
  zt::load_checkpoint(engine, dir, tag);
  EXPECT_EQ(engine.global_step(), 4);
  Run r;
  for (int s = 4; s < 10; ++s) r.losses.push_back(train_step(engine, kind, s));
  r.params = full_params(engine);
  return r;
}

void expect_equal(const Run& got, const std::vector<double>& want_losses,
                  const std::map<std::string, torch::Tensor>& want_params,
                  const std::string& what) {
  EXPECT_EQ(got.losses, std::vector<double>(want_losses.begin() + 4, want_losses.end())) << what;
  for (const auto& [name, p] : got.params) {
    EXPECT_TRUE(torch::equal(p, want_params.at(name))) << what << ": " << name << " differs";
  }
}

// The placements both NVMe tests run: stage 1 in fp32, stage 3 in bf16 with the parameter shards
// on NVMe too.
struct NvmeCase {
  ModelKind kind;
  int stage;
  torch::ScalarType dtype;
};
const std::vector<NvmeCase> kNvmeCases = {{ModelKind::kMlp, 1, torch::kFloat},
                                          {ModelKind::kTransformer, 3, torch::kBFloat16}};

TEST(NvmeResume, SaveLoadStreamsChunksAndResumesBitForBit) {
  for (const NvmeCase& k : kNvmeCases) {
    const std::string name = "nvme_" + std::to_string(k.stage);
    const std::string dir = test_dir(name);
    const zt::EngineOptions nvme = nvme_options(k.kind, k.stage, k.dtype, true);
    const zt::EngineOptions cpu = nvme_options(k.kind, k.stage, k.dtype, false);
    std::vector<double> want;
    std::map<std::string, torch::Tensor> want_params;
    {
      zt::Engine engine(make_model(k.kind), nvme, g_comm);
      for (int s = 0; s < 10; ++s) want.push_back(train_step(engine, k.kind, s));
      want_params = full_params(engine);
    }
    for (const auto& [tag, saver] :
         {std::pair<std::string, zt::EngineOptions>{"nvme4", nvme}, {"cpu4", cpu}}) {
      zt::Engine engine(make_model(k.kind), saver, g_comm);
      for (int s = 0; s < 4; ++s) train_step(engine, k.kind, s);
      zt::save_checkpoint(engine, dir, tag);
    }
    expect_equal(resume(k.kind, nvme, dir, "nvme4"), want, want_params, name + " nvme -> nvme");
    expect_equal(resume(k.kind, cpu, dir, "nvme4"), want, want_params, name + " nvme -> cpu");
    expect_equal(resume(k.kind, nvme, dir, "cpu4"), want, want_params, name + " cpu -> nvme");
    // Other buckets: the saved ranges do not match this engine's, so the load reshards piece by
    // piece.
    zt::EngineOptions other = nvme;
    other.reduce_bucket_size = 61;
    expect_equal(resume(k.kind, other, dir, "nvme4"), want, want_params, name + " resharded");
  }
}

// Background saves with offload_optimizer nvme: the write streams the masters and Adam state
// from the swap files, and the step after the save rewrites a buffer's files only once the write
// has read them. The write here waits 1 s before it reads anything, so the first step after the
// save has to wait for it; the checkpoint is still the save step's (the same bytes as the
// synchronous save of that step), training is unchanged, and resuming from it is bit for bit.
TEST(AsyncNvme, WriteStreamsTheSwapFilesAndHoldsTheNextStep) {
  for (const NvmeCase& k : kNvmeCases) {
    const std::string name = "async_nvme_" + std::to_string(k.stage);
    const std::string sync_dir = test_dir(name + "_sync"), async_dir = test_dir(name + "_async");
    const zt::EngineOptions nvme = nvme_options(k.kind, k.stage, k.dtype, true);
    std::vector<double> want, got;
    std::map<std::string, torch::Tensor> want_params;
    {
      zt::Engine engine(make_model(k.kind), nvme, g_comm);
      for (int s = 0; s < 10; ++s) want.push_back(train_step(engine, k.kind, s));
      want_params = full_params(engine);
    }
    {
      zt::Engine engine(make_model(k.kind), nvme, g_comm);
      for (int s = 0; s < 4; ++s) got.push_back(train_step(engine, k.kind, s));
      zt::save_checkpoint(engine, sync_dir, "t");
      zt::AsyncCheckpointer saver(engine);
      {
        PauseWrites pause(1);
        saver.save(async_dir, "t");
        EXPECT_TRUE(saver.in_flight());
        EXPECT_LT(saver.last_stall_seconds(), 0.5) << name << ": save() copied the files";
        const auto t0 = std::chrono::steady_clock::now();
        got.push_back(train_step(engine, k.kind, 4));
        const double step_s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        EXPECT_GE(step_s, 0.9) << name << ": the step did not wait for the write to read its files";
        for (int s = 5; s < 10; ++s) {
          got.push_back(train_step(engine, k.kind, s));
          saver.poll();
        }
        saver.wait();
      }
      EXPECT_GE(saver.last_held_seconds(), 0.8) << name << ": the wait was not counted";
      EXPECT_EQ(read_latest(async_dir), "t");
      if (g_comm->rank() == 0) {
        expect_same_files(fs::path(sync_dir) / "t", fs::path(async_dir) / "t");
      }
      barrier();
    }
    EXPECT_EQ(got, want) << name << ": training changed under the background save";
    expect_equal(resume(k.kind, nvme, async_dir, "t"), want, want_params, name + " async resume");
  }
}

}  // namespace nvme_resume
}  // namespace
