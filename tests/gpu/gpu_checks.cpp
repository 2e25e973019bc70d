#include "tests/gpu/gpu_checks.h"

#include <cmath>
#include <filesystem>
#include <limits>
#include <string>
#include <unistd.h>
#include <vector>

#include <torch/torch.h>

#include "core/base/error.h"
#include "core/cuda_plugin.h"
#include "core/engine.h"
#include "core/precision/overflow_check.h"
#include "core/zero/call_unit.h"
#include "optim/adam8bit.h"
#include "optim/cpu_adam.h"
#include "optim/fused_adam.h"
#include "parallel/dist.h"

namespace zt::gpu_checks {
namespace {

const torch::Device kGpu(torch::kCUDA, 0);

// max |a - b| - (atol + rtol |b|) <= 0 everywhere, else an error naming the worst element.
void expect_close(const std::string& what, const torch::Tensor& a, const torch::Tensor& b,
                  double rtol, double atol) {
  torch::Tensor x = a.to(torch::kCPU, torch::kDouble), y = b.to(torch::kCPU, torch::kDouble);
  ZT_CHECK(x.sizes() == y.sizes(), what, ": shapes ", x.sizes(), " vs ", y.sizes());
  torch::Tensor excess = (x - y).abs() - (atol + rtol * y.abs());
  const int64_t worst = excess.argmax().item<int64_t>();
  ZT_CHECK(excess.numel() == 0 || excess.view({-1})[worst].item<double>() <= 0, what, ": element ",
           worst, " is ", x.view({-1})[worst].item<double>(), " vs reference ",
           y.view({-1})[worst].item<double>(), " (rtol ", rtol, ", atol ", atol, ")");
}

std::shared_ptr<dist::Communicator> nccl_one_rank() {
  dist::CommOptions o;
  o.backend = "nccl";
  o.cuda = true;
  // Short: a hung NCCL initialisation must fail the check well inside the GPU window.
  o.timeout = std::chrono::seconds(30);
  return dist::create_communicator(o, dist::Env{});
}

// ---- nccl_one_rank ---------------------------------------------------------------------------

void check_nccl() {
  auto comm = nccl_one_rank();
  ZT_CHECK(comm->size() == 1 && comm->rank() == 0 && comm->backend() == "nccl",
           "nccl communicator is rank ", comm->rank(), " of ", comm->size());
  for (auto type : {torch::kFloat, torch::kHalf, torch::kBFloat16, torch::kInt, torch::kLong}) {
    const std::string name = c10::toString(type);
    const int64_t n = 1 << 20;
    torch::Tensor ref = (torch::arange(n, torch::kLong) % 7 + 1).to(type);
    torch::Tensor t = ref.to(kGpu);
    comm->all_reduce(t, dist::ReduceOp::kSum)->wait();
    ZT_CHECK(torch::equal(t.cpu(), ref), "nccl all_reduce ", name, " of one rank changed values");
    torch::Tensor out = torch::empty({n}, t.options());
    comm->reduce_scatter(t, out, dist::ReduceOp::kMax)->wait();
    ZT_CHECK(torch::equal(out.cpu(), ref), "nccl reduce_scatter ", name, " differs");
    torch::Tensor flat = torch::zeros({n}, t.options());
    comm->all_gather(out, flat)->wait();
    ZT_CHECK(torch::equal(flat.cpu(), ref), "nccl all_gather ", name, " differs");
    comm->broadcast(flat, 0)->wait();
    ZT_CHECK(torch::equal(flat.cpu(), ref), "nccl broadcast ", name, " differs");
  }
  // Stream order: the collective runs on the communicator's stream; after wait(), a kernel on
  // the current stream must see its result, with no host synchronisation in between.
  torch::Tensor big = torch::ones({1 << 24}, torch::TensorOptions().device(kGpu));
  big.mul_(3);
  auto work = comm->all_reduce(big, dist::ReduceOp::kSum);
  work->wait();
  big.add_(1);
  ZT_CHECK(big.sum().item<double>() == 4.0 * (1 << 24), "nccl wait() did not order the stream");
  comm->barrier()->wait();
  ZT_CHECK(work->is_completed(), "nccl work not completed after a barrier");
}

// ---- overflow_check --------------------------------------------------------------------------

void check_overflow() {
  torch::manual_seed(1);
  for (auto type : {torch::kFloat, torch::kHalf, torch::kBFloat16}) {
    const std::string name = c10::toString(type);
    for (int64_t n : {int64_t{1}, int64_t{1000003}}) {
      torch::Tensor cpu = (torch::randn({n}) * 100).to(type);
      torch::Tensor gpu = cpu.to(kGpu);
      const bool cpu_bad = check_and_unscale_(cpu, 0.3f);
      const bool gpu_bad = check_and_unscale_(gpu, 0.3f);
      ZT_CHECK(!cpu_bad && !gpu_bad, "overflow found in finite ", name, " values");
      ZT_CHECK(torch::equal(gpu.cpu(), cpu), "unscaled ", name, " values differ from the CPU pass");
      for (float bad :
           {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
        torch::Tensor x = torch::ones({n}, torch::TensorOptions().dtype(type).device(kGpu));
        x[n - 1] = bad;
        ZT_CHECK(check_and_unscale_(x, 1.0f), "CUDA pass missed ", bad, " in ", name);
      }
    }
  }
  // The deferred form: one flag over several tensors, read once.
  auto opts = torch::TensorOptions().device(kGpu);
  torch::Tensor flag = torch::zeros({1}, opts.dtype(torch::kInt));
  torch::Tensor a = torch::ones({1000}, opts), b = torch::ones({1000}, opts);
  check_and_unscale_into_(a, 0.5f, flag);
  ZT_CHECK(flag.item<int>() == 0, "check_and_unscale_into_ flagged finite values");
  b[17] = std::numeric_limits<float>::infinity();
  check_and_unscale_into_(b, 0.5f, flag);
  check_and_unscale_into_(a, 0.5f, flag);
  ZT_CHECK(flag.item<int>() == 1, "check_and_unscale_into_ lost the inf of the second tensor");
  ZT_CHECK(a[0].item<float>() == 0.25f, "check_and_unscale_into_ did not unscale");
}

// ---- optimizers ------------------------------------------------------------------------------

std::vector<optim::GroupRange> test_groups(int64_t n) {
  optim::GroupHyper a;
  a.lr = 1e-2;
  a.weight_decay = 0.1;
  optim::GroupHyper b;
  b.lr = 3e-3;
  b.beta1 = 0.8;
  b.beta2 = 0.95;
  b.eps = 1e-6;
  // 100 groups (more than one fused launch), gaps between them (padding stays untouched).
  std::vector<optim::GroupRange> groups;
  int64_t off = 3;
  for (int i = 0; i < 100 && off < n; ++i) {
    const int64_t len = std::min<int64_t>(n - off, 1 + (i * 7919) % 20000);
    groups.push_back({off, off + len, i % 2 ? a : b});
    off += len + (i % 3);
  }
  return groups;
}

// a == b bit for bit (NaN positions included), else an error naming how many and the first.
void expect_equal(const std::string& what, const torch::Tensor& a, const torch::Tensor& b) {
  torch::Tensor x = a.cpu(), y = b.cpu();
  ZT_CHECK(x.sizes() == y.sizes() && x.scalar_type() == y.scalar_type(), what, ": ", x.sizes(), " ",
           x.scalar_type(), " vs ", y.sizes(), " ", y.scalar_type());
  torch::Tensor differ = (x != y) & ~(x.isnan() & y.isnan());
  const int64_t count = differ.sum().item<int64_t>();
  if (count == 0) return;
  const int64_t first = differ.nonzero()[0][0].item<int64_t>();
  ZT_THROW(what, ": ", count, " of ", x.numel(), " elements differ; first at ", first, ": ",
           x[first].item<double>(), " vs reference ", y[first].item<double>());
}

// Elements inside some group (the only ones a step may write).
torch::Tensor grouped_mask(const std::vector<optim::GroupRange>& groups, int64_t n) {
  torch::Tensor mask = torch::zeros({n}, torch::kBool);
  for (const auto& g : groups) mask.narrow(0, g.begin, g.end - g.begin).fill_(true);
  return mask;
}

void check_fused_adam() {
  torch::manual_seed(2);
  const int64_t n = 1'000'003;
  auto groups = test_groups(n);
  const torch::Tensor in_group = grouped_mask(groups, n);
  torch::Tensor master = torch::randn({n});
  torch::Tensor cpu_master = master.clone(), gpu_master = master.to(kGpu);
  torch::Tensor cpu_half = torch::zeros({n}, torch::kBFloat16);
  torch::Tensor gpu_half = cpu_half.to(kGpu);
  // CpuAdam's AVX2/AVX-512 builds round as the kernel does (adam_formula.h, fused form), so with
  // one of them the two agree bit for bit; the scalar build rounds unfused (an ulp or so a step).
  const optim::SimdPath path = optim::best_simd_path();
  const bool exact = path != optim::SimdPath::kScalar;
  optim::OptimizerSpec cpu_spec;
  cpu_spec.type = "CpuAdam";
  cpu_spec.simd = optim::simd_path_name(path);
  optim::OptimizerSpec gpu_spec;
  gpu_spec.type = "FusedAdam";
  gpu_spec.cuda_launcher = cuda::require_symbol(optim::kFusedAdamSymbol, "fused Adam check");
  auto cpu = optim::make_shard_optimizer(cpu_spec);
  auto gpu = optim::make_shard_optimizer(gpu_spec);
  for (int step = 0; step < 5; ++step) {
    torch::Tensor grad = torch::randn({n});
    cpu->step(cpu_master, grad, groups, &cpu_half);
    gpu->step(gpu_master, grad.to(kGpu), groups, &gpu_half);
  }
  const std::string ref = std::string("CpuAdam (") + cpu_spec.simd + ")";
  auto gs = gpu->state_dict(), cs = cpu->state_dict();
  if (exact) {
    expect_equal("FusedAdam master vs " + ref, gpu_master, cpu_master);
    expect_equal("FusedAdam bf16 copy vs " + ref, gpu_half, cpu_half);
    expect_equal("FusedAdam exp_avg vs " + ref, gs.at("exp_avg"), cs.at("exp_avg"));
    expect_equal("FusedAdam exp_avg_sq vs " + ref, gs.at("exp_avg_sq"), cs.at("exp_avg_sq"));
    return;
  }
  expect_close("FusedAdam master vs " + ref, gpu_master, cpu_master, 1e-5, 1e-6);
  expect_close("FusedAdam exp_avg vs " + ref, gs.at("exp_avg"), cs.at("exp_avg"), 1e-5, 1e-7);
  expect_close("FusedAdam exp_avg_sq vs " + ref, gs.at("exp_avg_sq"), cs.at("exp_avg_sq"), 1e-5,
               1e-9);
  // The kernel's own contract: the bf16 copy of every grouped element, nothing outside groups
  // (the gaps, from offset 0, keep their zeros and their master values).
  const torch::Tensor got_half = gpu_half.cpu(), got_master = gpu_master.cpu();
  expect_equal("FusedAdam bf16 copy inside groups", got_half.masked_select(in_group),
               got_master.masked_select(in_group).to(torch::kBFloat16));
  expect_equal("FusedAdam bf16 copy outside groups", got_half.masked_select(~in_group),
               torch::zeros({n}, torch::kBFloat16).masked_select(~in_group));
  expect_equal("FusedAdam master outside groups", got_master.masked_select(~in_group),
               master.masked_select(~in_group));
}

void check_adam8bit() {
  for (int64_t block : {int64_t{256}, int64_t{2048}}) {
    for (int64_t n : {int64_t{1000}, int64_t{1'000'003}}) {  // fp32 (small) and quantized state
      torch::manual_seed(3);
      auto groups = test_groups(n);
      optim::OptimizerSpec spec;
      spec.type = "Adam8bit";
      spec.block_size = block;
      optim::Adam8bit cpu(spec);
      spec.cuda_launcher = cuda::require_symbol(optim::kAdam8bitSymbol, "8-bit Adam check");
      optim::Adam8bit gpu(spec);
      torch::Tensor master = torch::randn({n});
      torch::Tensor cpu_master = master.clone(), gpu_master = master.to(kGpu);
      torch::Tensor cpu_half = torch::zeros({n}, torch::kHalf);
      torch::Tensor gpu_half = cpu_half.to(kGpu);
      for (int step = 0; step < 5; ++step) {
        torch::Tensor grad = torch::randn({n}) * (step + 1);
        cpu.step(cpu_master, grad, groups, &cpu_half);
        gpu.step(gpu_master, grad.to(kGpu), groups, &gpu_half);
      }
      const std::string what =
          "Adam8bit block " + std::to_string(block) + ", n " + std::to_string(n);
      ZT_CHECK(cpu.quantized() == gpu.quantized() && cpu.quantized() == (n >= spec.min_8bit_size),
               what, ": quantized state ", gpu.quantized(), " vs CPU ", cpu.quantized());
      // Same operations, same rounding: equal up to the rare code that falls on a midpoint.
      expect_close(what + " master", gpu_master, cpu_master, 1e-6, 1e-7);
      expect_close(what + " fp16 copy", gpu_half.to(torch::kFloat), cpu_half.to(torch::kFloat),
                   1e-3, 1e-6);
      auto gs = gpu.state_dict(), cs = cpu.state_dict();
      if (cpu.quantized()) {
        for (const char* key : {"exp_avg_code", "exp_avg_sq_code"}) {
          const double differ =
              gs.at(key).cpu().ne(cs.at(key)).sum().item<double>() / static_cast<double>(n);
          ZT_CHECK(differ <= 1e-4, what, ": ", differ * 100, "% of ", key, " differ from the CPU");
        }
        expect_close(what + " exp_avg_absmax", gs.at("exp_avg_absmax"), cs.at("exp_avg_absmax"),
                     1e-6, 0);
        expect_close(what + " exp_avg_sq_absmax", gs.at("exp_avg_sq_absmax"),
                     cs.at("exp_avg_sq_absmax"), 1e-6, 0);
      }
      auto [gm, gv] = gpu.dequantized_state();
      auto [cm, cv] = cpu.dequantized_state();
      expect_close(what + " m", gm, cm, 1e-2, 1e-7);
      expect_close(what + " v", gv, cv, 1e-2, 1e-9);
    }
  }
}

// ---- engine ----------------------------------------------------------------------------------

// Two stage-3 units (a, b) and a root part (c); odd sizes so flat buffers need padding.
struct MlpImpl : torch::nn::Module {
  MlpImpl() {
    a = register_module("a", torch::nn::Linear(33, 65));
    b = register_module("b", torch::nn::Linear(65, 47));
    c = register_module("c", torch::nn::Linear(47, 5));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor h = torch::relu(zt::call_unit(*a, x));
    h = torch::relu(zt::call_unit(*b, h));
    return c->forward(h);
  }
  torch::nn::Linear a{nullptr}, b{nullptr}, c{nullptr};
};
TORCH_MODULE(Mlp);

// offload: the optimizer on the host (CpuAdam); param: where stage-3 shards live (offload_param:
// "", "cpu" or "nvme"); nvme_optimizer: master and Adam state in files (offload_optimizer nvme).
struct EngineCase {
  int stage;
  bool offload;
  std::string param = "";
  bool nvme_optimizer = false;
};

// Scratch space for the NVMe cases: a directory of this process under the system's temp dir.
std::string nvme_scratch() {
  const std::string d =
      (std::filesystem::temp_directory_path() / ("zt_gpu_check_nvme_" + std::to_string(::getpid())))
          .string();
  std::filesystem::create_directories(d);
  return d;
}

std::vector<std::pair<torch::Tensor, torch::Tensor>> batches(int count) {
  torch::manual_seed(5);
  std::vector<std::pair<torch::Tensor, torch::Tensor>> out;
  for (int i = 0; i < count; ++i) {
    out.emplace_back(torch::randn({16, 33}).to(kGpu), torch::randint(0, 5, {16}).to(kGpu));
  }
  return out;
}

EngineOptions engine_options(int stage, bool offload, at::ScalarType dtype) {
  EngineOptions o;
  o.stage = stage;
  o.offload_optimizer = offload;
  o.compute_dtype = dtype;
  o.optimizer.type = offload ? "CpuAdam" : "AdamW";
  o.hyper.lr = 1e-2;
  o.hyper.weight_decay = 0.01;
  o.units = {"a", "b"};
  o.reduce_bucket_size = 1000;  // several buckets per unit
  o.stage3_prefetch_bucket_size = 3000;
  return o;
}

void check_engine_equivalence() {
  const auto data = batches(4);
  // Parameter offload (issue 19): the shards in pinned host memory or in files, gathered to the
  // GPU per unit; and the optimizer's master and state on NVMe with the model on the GPU.
  const std::vector<EngineCase> cases = {{0, false},
                                         {1, false},
                                         {2, false},
                                         {3, false},
                                         {2, true},
                                         {3, true},
                                         {3, true, "cpu"},
                                         {3, false, "cpu"},
                                         {3, true, "nvme"},
                                         {3, true, "", true},
                                         {3, true, "nvme", true}};
  const std::string scratch = nvme_scratch();
  for (const EngineCase& c : cases) {
    const std::string what = "engine stage " + std::to_string(c.stage) +
                             (c.offload ? " + offload" : "") +
                             (c.param.empty() ? "" : " + param " + c.param) +
                             (c.nvme_optimizer ? " + nvme optimizer" : "");
    torch::manual_seed(4);
    Mlp model;
    Mlp reference;
    {
      torch::NoGradGuard no_grad;
      auto src = model->parameters();
      auto dst = reference->parameters();
      for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
    }
    model->to(kGpu);
    reference->to(kGpu);
    torch::optim::AdamW ref_opt(reference->parameters(),
                                torch::optim::AdamWOptions(1e-2).weight_decay(0.01));
    EngineOptions o = engine_options(c.stage, c.offload, at::kFloat);
    if (!c.param.empty()) {
      o.offload_param.device =
          c.param == "cpu" ? ParamOffloadOptions::Device::kCpu : ParamOffloadOptions::Device::kNvme;
      o.offload_param.pin_memory = true;
      o.offload_param.nvme_path = scratch;
      o.offload_param.max_in_cpu = 0;
    }
    if (c.nvme_optimizer) {
      o.nvme_optimizer.path = scratch;
      o.nvme_optimizer.sub_group_size = 700;
    }
    Engine engine(model.ptr(), o, nccl_one_rank());
    for (const auto& batch : data) {
      const torch::Tensor& x = batch.first;
      const torch::Tensor& y = batch.second;
      torch::Tensor loss =
          engine.forward([&] { return torch::cross_entropy_loss(model->forward(x), y); });
      engine.backward(loss);
      engine.step();
      ref_opt.zero_grad();
      torch::Tensor ref_loss = torch::cross_entropy_loss(reference->forward(x), y);
      ref_loss.backward();
      ref_opt.step();
      expect_close(what + " loss", loss.detach(), ref_loss.detach(), 1e-5, 1e-6);
    }
    Engine::GatheredParameters full(engine);
    auto got = model->named_parameters();
    auto want = reference->named_parameters();
    for (const auto& p : want) {
      expect_close(what + " parameter " + p.key(), got[p.key()], p.value(), 1e-4, 1e-5);
    }
  }
  std::filesystem::remove_all(scratch);
}

void check_engine_half() {
  const auto data = batches(8);
  for (at::ScalarType dtype : {at::kBFloat16, at::kHalf}) {
    for (int stage : {0, 2, 3}) {
      const std::string what =
          std::string(c10::toString(dtype)) + " engine stage " + std::to_string(stage);
      torch::manual_seed(4);
      Mlp model;
      model->to(kGpu);
      Engine engine(model.ptr(), engine_options(stage, false, dtype), nccl_one_rank());
      double first = 0, last = 0;
      for (int epoch = 0; epoch < 5; ++epoch) {
        for (const auto& batch : data) {
          const torch::Tensor& x = batch.first;
          const torch::Tensor& y = batch.second;
          torch::Tensor loss = engine.forward([&] {
            return torch::cross_entropy_loss(model->forward(x.to(dtype)).to(torch::kFloat), y);
          });
          engine.backward(loss);
          engine.step();
          last = loss.item<double>();
          if (epoch == 0 && first == 0) first = last;
        }
      }
      ZT_CHECK(std::isfinite(last) && last < 0.8 * first, what, ": loss went from ", first, " to ",
               last, " over 40 steps");
      ZT_CHECK(engine.skipped_steps() <= 2, what, ": ", engine.skipped_steps(),
               " steps skipped for overflow");
    }
  }
}

}  // namespace

std::string cuda_unavailable() {
  const cuda::Kernels* k = cuda::kernels();
  if (k == nullptr) return cuda::load_error();
  if (k->device_count() == 0) return "the CUDA plugin loaded but sees no GPU";
  return "";
}

const std::vector<Check>& all_checks() {
  static const std::vector<Check> checks = {
      {"nccl_one_rank", check_nccl},
      {"overflow_check", check_overflow},
      {"fused_adam", check_fused_adam},
      {"adam8bit", check_adam8bit},
      {"engine_equivalence", check_engine_equivalence},
      {"engine_half", check_engine_half},
  };
  return checks;
}

}  // namespace zt::gpu_checks
