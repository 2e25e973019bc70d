// Pretrained weights into the shards of a GPT built partitioned (models/gpt/pretrained.h:
// load_pretrained_shards; weights/safetensors_weights.h), against the whole-model path
// (read_pretrained_gpt + load_by_name into a model built whole): bit-identical parameters, and
// three bf16 steps at stage 3 bit-identical, from one F32 file, a sharded set with its index, and
// a BF16 file; the load's memory is this rank's shards plus at most one tensor; every bad
// directory is one line naming file and tensor, on every rank. Run under mpirun -np 1, 2 and 3.

#include <filesystem>
#include <fstream>
#include <map>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "base/error.h"
#include "core/engine.h"
#include "models/gpt/gpt_model.h"
#include "models/gpt/hf_gpt2.h"
#include "models/gpt/pretrained.h"
#include "tests/support/full_parameters.h"
#include "tests/support/mpi_world.h"
#include "tests/support/safetensors_file.h"
#include "train/cpu_memory_meter.h"
#include "train/load_by_name.h"
#include "weights/safetensors_reader.h"
#include "weights/safetensors_writer.h"

namespace zt::models {

// The training run's pieces (train/): TrainingRun and its bookkeeping.
using namespace zt::train;

namespace {

namespace fs = std::filesystem;

std::shared_ptr<dist::Communicator>& g_comm = testing::mpi_world();

constexpr int64_t kReduceBucket = 500;  // several buckets per block, cut mid-row
constexpr int64_t kPersistence = 20;    // the layer norms' buckets stay whole

GptShape small_shape() {
  GptShape s;
  s.n_layer = 3;
  s.n_head = 2;
  s.d_model = 12;
  s.vocab_size = 37;  // odd: shard boundaries fall inside rows of wte and of the Conv1D weights
  s.max_seq_len = 8;
  return s;
}

zero::PartitionOptions partition_options() {
  return {.rank = g_comm->rank(),
          .world = g_comm->size(),
          .reduce_bucket_size = kReduceBucket,
          .persistence_threshold = kPersistence};
}

// Written by rank 0, per world size (ctest runs np1..np3 one after another on one tree).
fs::path work_dir() {
  return fs::path(ZT_BINARY_DIR) / "Testing" / "gpt_pretrained_shards" /
         ("np" + std::to_string(g_comm->size()));
}

// The values a "pretrained" GPT of `shape` holds (torch's generator seeded with 11), by our names.
NamedTensors pretrained_values(const GptShape& shape) {
  torch::manual_seed(11);
  Gpt m(shape);
  NamedTensors v;
  for (const auto& p : m->named_parameters()) v[p.key()] = p.value().detach().clone();
  return v;
}

using Named = testing::NamedTensorList;
using testing::expect_identical;

void write_file(const fs::path& path, const Named& tensors) {
  testing::write_safetensors(path.string(), tensors);
}

// DIR/model.safetensors's tensors in file order.
Named file_tensors(const fs::path& dir) {
  SafetensorsReader r((dir / "model.safetensors").string());
  Named out;
  for (const auto& e : r.entries()) out.emplace_back(e.name, r.read(e.name));
  return out;
}

// The one-file directory `from` as Hugging Face shards it: `n` files of consecutive tensors and
// model.safetensors.index.json.
void write_sharded(const fs::path& from, const fs::path& to, int n) {
  fs::create_directories(to);
  fs::copy_file(from / "config.json", to / "config.json", fs::copy_options::overwrite_existing);
  const Named all = file_tensors(from);
  std::ofstream index(to / "model.safetensors.index.json");
  index << "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {";
  const size_t per = (all.size() + n - 1) / n;
  for (int f = 0; f < n; ++f) {
    const std::string name =
        "model-0000" + std::to_string(f + 1) + "-of-0000" + std::to_string(n) + ".safetensors";
    Named part(all.begin() + f * per, all.begin() + std::min(all.size(), (f + 1) * per));
    write_file(to / name, part);
    for (size_t i = 0; i < part.size(); ++i) {
      index << (f || i ? ", " : "") << "\"" << part[i].first << "\": \"" << name << "\"";
    }
  }
  index << "}}\n";
}

// An HF directory with `tensors` as its one file (config of `shape`).
void write_dir(const fs::path& dir, const GptShape& shape, const Named& tensors) {
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << hf_gpt2_config_json(shape);
  write_file(dir / "model.safetensors", tensors);
}

// Rank 0 writes, the others wait.
void on_rank0(const std::function<void()>& f) {
  if (g_comm->rank() == 0) f();
  g_comm->barrier()->wait();
}

struct Built {
  Gpt model{nullptr};
  std::unique_ptr<Engine> engine;
};

EngineOptions engine_options(const Gpt& m) {
  EngineOptions o;
  o.stage = 3;
  o.units = m->unit_names();
  o.reduce_bucket_size = kReduceBucket;
  o.stage3_param_persistence_threshold = kPersistence;
  o.compute_dtype = at::kBFloat16;
  o.optimizer.type = zt::optim::OptimizerKind::kAdamW;
  o.hyper.lr = 1e-2;
  return o;
}

// The whole-model path: built whole, every pretrained value loaded, then the engine shards it.
Built build_whole(const GptShape& shape, const fs::path& dir) {
  torch::manual_seed(7);
  Built b;
  b.model = Gpt(shape);
  PretrainedGpt p = read_pretrained_gpt(dir.string());
  check_same_architecture(shape, p);
  load_by_name(*b.model, p.values, {});
  b.engine = std::make_unique<Engine>(b.model.ptr(), engine_options(b.model), g_comm, nullptr);
  return b;
}

// Built partitioned, then the files read into this rank's shards.
Built build_sharded(const GptShape& shape, const fs::path& dir) {
  torch::manual_seed(7);
  auto parts = std::make_shared<zero::PartitionedInit>(partition_options());
  Built b;
  b.model = Gpt(shape, parts.get());
  load_pretrained_shards(dir.string(), shape, *parts);
  b.engine = std::make_unique<Engine>(b.model.ptr(), engine_options(b.model), g_comm, parts);
  return b;
}

void expect_same_masters(Engine& a, Engine& b) {
  auto sa = a.shard_states(), sb = b.shard_states();
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size(); ++i) {
    EXPECT_TRUE(torch::equal(sa[i].master, sb[i].master)) << "shard " << i;
  }
}

// Each rank its own two sequences of one global batch.
std::vector<double> train(Built& b, int steps) {
  std::vector<double> losses;
  const int r = g_comm->rank(), n = g_comm->size();
  for (int s = 0; s < steps; ++s) {
    torch::manual_seed(50 + s);
    torch::Tensor ids = torch::randint(0, 37, {2 * n, 8}, torch::kLong).narrow(0, 2 * r, 2);
    torch::Tensor loss = b.engine->forward(
        [&] { return GptImpl::loss(b.model->forward(ids, {}), ids.roll(-1, 1)); });
    b.engine->backward(loss);
    b.engine->step();
    losses.push_back(loss.item<double>());
  }
  return losses;
}

class GptPretrainedShards : public ::testing::TestWithParam<std::string> {};

TEST_P(GptPretrainedShards, SameValuesAndTrainingAsWholeModelLoad) {
  const GptShape shape = small_shape();
  const NamedTensors values = pretrained_values(shape);
  const fs::path dir = work_dir() / GetParam();
  const bool bf16 = GetParam() == "bf16";
  on_rank0([&] {
    fs::remove_all(dir);
    NamedTensors stored = values;
    if (bf16) {
      for (auto& [n, v] : stored) v = v.to(at::kBFloat16);
    }
    if (GetParam() == "sharded") {
      const fs::path one = work_dir() / "sharded_source";
      fs::remove_all(one);
      write_hf_gpt2(one.string(), shape, stored);
      write_sharded(one, dir, 3);
    } else {
      write_hf_gpt2(dir.string(), shape, stored);
    }
  });
  Built whole = build_whole(shape, dir), sharded = build_sharded(shape, dir);
  expect_same_masters(*whole.engine, *sharded.engine);  // fp32, this rank's shards
  const auto loaded =
      testing::full_parameters(*sharded.engine);  // gathered, in the compute dtype (bf16)
  expect_identical(testing::full_parameters(*whole.engine), loaded);
  // And they are the file's values (a BF16 file's, widened exactly).
  for (const auto& [name, v] : values) {
    const at::Tensor expected = bf16 ? v.to(at::kBFloat16).to(at::kFloat) : v;
    EXPECT_TRUE(torch::equal(loaded.at(name), expected.to(loaded.at(name).scalar_type()))) << name;
  }
  const std::vector<double> a = train(whole, 3), b = train(sharded, 3);
  EXPECT_EQ(a, b);
  expect_identical(testing::full_parameters(*whole.engine),
                   testing::full_parameters(*sharded.engine));
  expect_same_masters(*whole.engine, *sharded.engine);
}

INSTANTIATE_TEST_SUITE_P(Files, GptPretrainedShards, ::testing::Values("f32", "sharded", "bf16"));

// Memory of the load, counted by LibTorch's CPU allocator: after partitioned construction this
// rank holds its shards; reading the files into them holds at most one tensor more (an
// unaligned tensor is read whole; mapped reads allocate nothing but, at one rank, ATen's 60x60
// block for a whole transposed copy). Loading into a whole model (load_by_name) holds the model and
// the file's values, which the same bound refuses.
TEST(GptPretrainedShardsMemory, LoadHoldsShardsPlusOneTensor) {
  CpuMemoryMeter::install();
  GptShape shape = small_shape();
  shape.d_model = 48;  // a block ~28k parameters, wte 37 x 48
  shape.n_layer = 4;
  const fs::path dir = work_dir() / "memory";
  on_rank0([&] {
    fs::remove_all(dir);
    write_hf_gpt2(dir.string(), shape, pretrained_values(shape));
  });
  int64_t largest_tensor = 0;
  for (const auto& [n, v] : pretrained_values(shape)) {
    largest_tensor = std::max(largest_tensor, v.numel() * 4);
  }
  const int64_t slack = 16 * 1024;

  const int64_t base = CpuMemoryMeter::live_bytes();
  zero::PartitionedInit parts(partition_options());
  torch::manual_seed(7);
  Gpt sharded(shape, &parts);
  const int64_t built = CpuMemoryMeter::live_bytes() - base;
  CpuMemoryMeter::reset_peak();
  load_pretrained_shards(dir.string(), shape, parts);
  const int64_t load_peak = CpuMemoryMeter::peak_bytes() - base;
  const int64_t bound = parts.resident_bytes() + largest_tensor + slack;
  EXPECT_LE(built, parts.resident_bytes() + slack);
  EXPECT_LE(load_peak, bound) << "shards " << parts.resident_bytes() << " B, largest tensor "
                              << largest_tensor << " B";

  const int64_t base2 = CpuMemoryMeter::live_bytes();
  CpuMemoryMeter::reset_peak();
  {
    torch::manual_seed(7);
    Gpt whole(shape);
    load_by_name(*whole, read_pretrained_gpt(dir.string()).values, {});
  }
  const int64_t whole_peak = CpuMemoryMeter::peak_bytes() - base2;
  EXPECT_GT(whole_peak, bound) << "the bound would not tell the whole-model load apart";
  std::printf(
      "rank %d/%d: built %lld B, load peak %lld B (shards %lld B, bound %lld B), whole "
      "load %lld B\n",
      g_comm->rank(), g_comm->size(), static_cast<long long>(built),
      static_cast<long long>(load_peak), static_cast<long long>(parts.resident_bytes()),
      static_cast<long long>(bound), static_cast<long long>(whole_peak));
}

// Each bad directory fails on every rank alike (every parameter is asked for on every rank), in
// one line naming the file (or the index) and the tensor; the whole-model path refuses it too.
TEST(GptPretrainedShardsErrors, OneLineNamingFileAndTensor) {
  const GptShape shape = small_shape();
  const fs::path good = work_dir() / "errors_good";
  on_rank0([&] {
    fs::remove_all(good);
    write_hf_gpt2(good.string(), shape, pretrained_values(shape));
  });
  const Named all = file_tensors(good);
  auto with = [&](const std::function<void(Named&)>& edit) {
    Named t = all;
    edit(t);
    return t;
  };
  auto find = [](Named& t, const std::string& name) -> at::Tensor& {
    for (auto& [n, v] : t) {
      if (n == name) return v;
    }
    throw std::runtime_error("no " + name);
  };
  struct Case {
    std::string name;
    Named tensors;
    std::vector<std::string> message;
  };
  const std::vector<Case> cases = {
      {"missing",
       with([](Named& t) {
         t.erase(std::find_if(t.begin(), t.end(), [](const auto& p) {
           return p.first == "transformer.h.1.attn.c_proj.bias";
         }));
       }),
       {"no tensor 'transformer.h.1.attn.c_proj.bias'", "blocks.1.attn.proj.bias"}},
      {"shape",
       with([&](Named& t) {
         find(t, "transformer.h.2.mlp.c_fc.weight") = torch::zeros({12, 47});
       }),
       {"tensor 'transformer.h.2.mlp.c_fc.weight' is [12, 47]", "needs [12, 48]"}},
      {"dtype",
       with([&](Named& t) { find(t, "transformer.ln_f.bias") = torch::zeros({12}, at::kLong); }),
       {"tensor 'transformer.ln_f.bias' is Long", "floating-point"}},
      {"extra",
       with([](Named& t) { t.emplace_back("transformer.h.3.ln_1.weight", torch::ones({12})); }),
       {"tensor 'transformer.h.3.ln_1.weight' matches no parameter"}},
      {"head",
       with([&](Named& t) {
         t.emplace_back("lm_head.weight", find(t, "transformer.wte.weight") + 1);
       }),
       {"lm_head.weight differs from transformer.wte.weight"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const fs::path dir = work_dir() / ("errors_" + c.name);
    on_rank0([&] {
      fs::remove_all(dir);
      write_dir(dir, shape, c.tensors);
    });
    zero::PartitionedInit parts(partition_options());
    Gpt m(shape, &parts);
    try {
      load_pretrained_shards(dir.string(), shape, parts);
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      const std::string msg = e.message();
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
      EXPECT_NE(msg.find((dir / "model.safetensors").string()), std::string::npos) << msg;
      for (const auto& part : c.message) EXPECT_NE(msg.find(part), std::string::npos) << msg;
    }
    Gpt whole(shape);
    EXPECT_THROW(load_by_name(*whole, read_pretrained_gpt(dir.string()).values, {}), Error);
  }
  // A tied head equal to wte is accepted, as the whole-model path accepts it.
  const fs::path tied = work_dir() / "errors_tied";
  on_rank0([&] {
    fs::remove_all(tied);
    write_dir(tied, shape, with([&](Named& t) {
                t.emplace_back("lm_head.weight", find(t, "transformer.wte.weight"));
              }));
  });
  zero::PartitionedInit parts(partition_options());
  Gpt m(shape, &parts);
  EXPECT_NO_THROW(load_pretrained_shards(tied.string(), shape, parts));
}

}  // namespace
}  // namespace zt::models
