#include "tests/gpu/gpu_checks.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <string>
#include <system_error>
#include <vector>

#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/torch.h>

#include "base/cuda_plugin.h"
#include "base/error.h"
#include "core/engine.h"
#include "core/ops/cross_entropy.h"
#include "core/zero/call_unit.h"
#include "optim/adam8bit.h"
#include "optim/cpu_adam.h"
#include "optim/fused_adam.h"
#include "parallel/dist.h"

namespace zt::gpu_checks {
namespace {

c10::Device& target() {
  static c10::Device d(c10::kCUDA, 0);
  return d;
}

// The cases of one check. The device window is short and rare, so a check reports every failing
// case of a run, not the first: each case runs until its own first error, and finish() then throws
// one error listing all of them. A CUDA fault that leaves a sticky error fails the cases after it
// too (each says so); a crash ends the process, which bench/gpu_check.sh reports for the check.
class Cases {
 public:
  template <typename Fn>
  void run(const std::string& name, Fn&& body) {
    ++count_;
    try {
      body();
    } catch (const std::exception& e) {
      failures_.push_back(name + ": " + describe(e));
    }
  }

  // Throws one zt::Error: "2 of 11 cases failed: A: why | B: why" (bench/gpu/gpu_report.py
  // prints one case a line, split at " | ").
  void finish() const {
    if (failures_.empty()) return;
    std::string list;
    for (const auto& f : failures_) list += (list.empty() ? "" : " | ") + f;
    ZT_THROW(failures_.size(), " of ", count_, " cases failed: ", list);
  }

 private:
  // A failed comparison of this file is told by its message alone (its location is always the
  // same helper); an error from the library keeps its file:line.
  static std::string describe(const std::exception& e) {
    if (const auto* z = dynamic_cast<const Error*>(&e)) {
      if (std::string(z->file()).find("tests/gpu/") != std::string::npos) {
        return first_line(z->message());
      }
    }
    return first_line(e.what());
  }

  int count_ = 0;
  std::vector<std::string> failures_;
};

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

// The device's own backend ("auto": nccl on CUDA; gloo or MPI behind a StagingCommunicator on
// another accelerator).
std::shared_ptr<dist::Communicator> one_rank_comm() {
  dist::CommOptions o;
  o.cuda = device().is_cuda();
  o.device = device();
  // Short: a hung NCCL initialisation must fail the check well inside the GPU window.
  o.timeout = std::chrono::seconds(30);
  return dist::create_communicator(o, dist::Env{});
}

// ---- nccl_one_rank ---------------------------------------------------------------------------

void check_nccl() {
  auto comm = one_rank_comm();
  ZT_CHECK(comm->size() == 1 && comm->rank() == 0, comm->backend(), " communicator is rank ",
           comm->rank(), " of ", comm->size());
  ZT_CHECK(!device().is_cuda() || comm->backend() == "nccl", "the backend on CUDA is ",
           comm->backend(), ", not nccl");
  Cases cases;
  for (auto type : {torch::kFloat, torch::kHalf, torch::kBFloat16, torch::kInt, torch::kLong}) {
    const std::string name = c10::toString(type);
    cases.run(name, [&] {
      const int64_t n = 1 << 20;
      torch::Tensor ref = (torch::arange(n, torch::kLong) % 7 + 1).to(type);
      torch::Tensor t = ref.to(device());
      comm->all_reduce(t, dist::ReduceOp::kSum)->wait();
      ZT_CHECK(torch::equal(t.cpu(), ref), "all_reduce of one rank changed values");
      torch::Tensor out = torch::empty({n}, t.options());
      comm->reduce_scatter(t, out, dist::ReduceOp::kMax)->wait();
      ZT_CHECK(torch::equal(out.cpu(), ref), "reduce_scatter differs");
      torch::Tensor flat = torch::zeros({n}, t.options());
      comm->all_gather(out, flat)->wait();
      ZT_CHECK(torch::equal(flat.cpu(), ref), "all_gather differs");
      comm->broadcast(flat, 0)->wait();
      ZT_CHECK(torch::equal(flat.cpu(), ref), "broadcast differs");
    });
  }
  // Stream order: the collective runs on the communicator's stream; after wait(), a kernel on
  // the current stream must see its result, with no host synchronisation in between.
  cases.run("stream order", [&] {
    torch::Tensor big = torch::ones({1 << 24}, torch::TensorOptions().device(device()));
    big.mul_(3);
    auto work = comm->all_reduce(big, dist::ReduceOp::kSum);
    work->wait();
    big.add_(1);
    ZT_CHECK(big.sum().item<double>() == 4.0 * (1 << 24), "wait() did not order the stream");
    comm->barrier()->wait();
    ZT_CHECK(work->is_completed(), "work not completed after a barrier");
  });
  cases.finish();
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
  torch::Tensor cpu_master = master.clone(), gpu_master = master.to(device());
  torch::Tensor cpu_half = torch::zeros({n}, torch::kBFloat16);
  torch::Tensor gpu_half = cpu_half.to(device());
  // CpuAdam's AVX2/AVX-512 builds round as the kernel does (optim/adam_formula.h, fused form), so
  // with one of them the two agree bit for bit; the scalar build rounds unfused (~1 ulp a step).
  const optim::SimdPath path = optim::best_simd_path();
  const bool exact = path != optim::SimdPath::kScalar;
  optim::OptimizerSpec cpu_spec;
  cpu_spec.type = zt::optim::OptimizerKind::kCpuAdam;
  cpu_spec.simd = optim::simd_path_name(path);
  optim::OptimizerSpec gpu_spec;
  gpu_spec.type = zt::optim::OptimizerKind::kFusedAdam;
  gpu_spec.cuda_launcher = cuda::require_symbol(optim::kFusedAdamSymbol, "fused Adam check");
  auto cpu = optim::make_shard_optimizer(cpu_spec);
  auto gpu = optim::make_shard_optimizer(gpu_spec);
  for (int step = 0; step < 5; ++step) {
    torch::Tensor grad = torch::randn({n});
    cpu->step(cpu_master, grad, groups, &cpu_half);
    gpu->step(gpu_master, grad.to(device()), groups, &gpu_half);
  }
  // Every comparison is a case: a wrong moment and a wrong master copy show up in one run.
  const std::string ref = std::string("vs CpuAdam (") + cpu_spec.simd + ")";
  auto gs = gpu->state_dict(), cs = cpu->state_dict();
  Cases cases;
  if (exact) {
    cases.run("master", [&] { expect_equal(ref, gpu_master, cpu_master); });
    cases.run("bf16 copy", [&] { expect_equal(ref, gpu_half, cpu_half); });
    for (const char* key : {"exp_avg", "exp_avg_sq"}) {
      cases.run(key, [&] { expect_equal(ref, gs.at(key), cs.at(key)); });
    }
    cases.finish();
    return;
  }
  cases.run("master", [&] { expect_close(ref, gpu_master, cpu_master, 1e-5, 1e-6); });
  cases.run("exp_avg", [&] { expect_close(ref, gs.at("exp_avg"), cs.at("exp_avg"), 1e-5, 1e-7); });
  cases.run("exp_avg_sq",
            [&] { expect_close(ref, gs.at("exp_avg_sq"), cs.at("exp_avg_sq"), 1e-5, 1e-9); });
  // The kernel's own contract: the bf16 copy of every grouped element, nothing outside groups
  // (the gaps, from offset 0, keep their zeros and their master values).
  const torch::Tensor got_half = gpu_half.cpu(), got_master = gpu_master.cpu();
  cases.run("bf16 copy inside groups", [&] {
    expect_equal("vs the master", got_half.masked_select(in_group),
                 got_master.masked_select(in_group).to(torch::kBFloat16));
  });
  cases.run("bf16 copy outside groups", [&] {
    expect_equal("vs zeros", got_half.masked_select(~in_group),
                 torch::zeros({n}, torch::kBFloat16).masked_select(~in_group));
  });
  cases.run("master outside groups", [&] {
    expect_equal("vs the initial values", got_master.masked_select(~in_group),
                 master.masked_select(~in_group));
  });
  cases.finish();
}

void adam8bit_case(int64_t block, int64_t n) {
  torch::manual_seed(3);
  auto groups = test_groups(n);
  optim::OptimizerSpec spec;
  spec.type = zt::optim::OptimizerKind::kAdam8bit;
  spec.block_size = block;
  optim::Adam8bit cpu(spec);
  spec.cuda_launcher = cuda::require_symbol(optim::kAdam8bitSymbol, "8-bit Adam check");
  optim::Adam8bit gpu(spec);
  torch::Tensor master = torch::randn({n});
  torch::Tensor cpu_master = master.clone(), gpu_master = master.to(device());
  torch::Tensor cpu_half = torch::zeros({n}, torch::kHalf);
  torch::Tensor gpu_half = cpu_half.to(device());
  for (int step = 0; step < 5; ++step) {
    torch::Tensor grad = torch::randn({n}) * (step + 1);
    cpu.step(cpu_master, grad, groups, &cpu_half);
    gpu.step(gpu_master, grad.to(device()), groups, &gpu_half);
  }
  ZT_CHECK(cpu.quantized() == gpu.quantized() && cpu.quantized() == (n >= spec.min_8bit_size),
           "quantized state ", gpu.quantized(), " vs CPU ", cpu.quantized());
  // Same operations, same rounding: equal up to the rare code that falls on a midpoint.
  expect_close("master", gpu_master, cpu_master, 1e-6, 1e-7);
  expect_close("fp16 copy", gpu_half.to(torch::kFloat), cpu_half.to(torch::kFloat), 1e-3, 1e-6);
  auto gs = gpu.state_dict(), cs = cpu.state_dict();
  if (cpu.quantized()) {
    for (const char* key : {"exp_avg_code", "exp_avg_sq_code"}) {
      const double differ =
          gs.at(key).cpu().ne(cs.at(key)).sum().item<double>() / static_cast<double>(n);
      ZT_CHECK(differ <= 1e-4, differ * 100, "% of ", key, " differ from the CPU");
    }
    expect_close("exp_avg_absmax", gs.at("exp_avg_absmax"), cs.at("exp_avg_absmax"), 1e-6, 0);
    expect_close("exp_avg_sq_absmax", gs.at("exp_avg_sq_absmax"), cs.at("exp_avg_sq_absmax"), 1e-6,
                 0);
  }
  auto [gm, gv] = gpu.dequantized_state();
  auto [cm, cv] = cpu.dequantized_state();
  expect_close("m", gm, cm, 1e-2, 1e-7);
  expect_close("v", gv, cv, 1e-2, 1e-9);
}

void check_adam8bit() {
  Cases cases;
  for (int64_t block : {int64_t{256}, int64_t{2048}}) {
    for (int64_t n : {int64_t{1000}, int64_t{1'000'003}}) {  // fp32 (small) and quantized state
      cases.run("block " + std::to_string(block) + ", n " + std::to_string(n),
                [&] { adam8bit_case(block, n); });
    }
  }
  cases.finish();
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

// DeepSpeed's default stage3_param_persistence_threshold: every flat buffer of Mlp (a few
// thousand elements at most) is below it, so at stage 3 all of them stay gathered.
constexpr int64_t kDeepSpeedPersistence = 100'000;

// One engine configuration. offload: offload_optimizer (the step on the host, CpuAdam); param:
// where stage-3 shards live between uses (offload_param "", "cpu" or "nvme"); nvme_optimizer:
// master and Adam state in files (offload_optimizer nvme); persistence:
// stage3_param_persistence_threshold.
struct EngineCase {
  int stage = 0;
  bool offload = false;
  std::string param = "";
  bool nvme_optimizer = false;
  int64_t persistence = 0;
  at::ScalarType dtype = at::kFloat;
};

std::string case_name(const EngineCase& c) {
  std::string name = "stage " + std::to_string(c.stage);
  if (c.dtype != at::kFloat) name = std::string(c10::toString(c.dtype)) + " " + name;
  if (c.offload) name += c.nvme_optimizer ? " + optimizer nvme" : " + optimizer cpu";
  if (!c.param.empty()) name += " + param " + c.param;
  if (c.persistence > 0) name += " + persistence " + std::to_string(c.persistence);
  return name;
}

// A fresh directory under the system's temp dir for one case's NVMe files, removed with it (after
// the case's engine, which is destroyed first, has closed them).
class ScratchDir {
 public:
  ScratchDir() {
    std::string t = (std::filesystem::temp_directory_path() / "zt_gpu_check_XXXXXX").string();
    ZT_CHECK(::mkdtemp(t.data()) != nullptr, "cannot create a scratch directory ", t, ": ",
             std::strerror(errno));
    path_ = t;
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

using Batches = std::vector<std::pair<torch::Tensor, torch::Tensor>>;

Batches batches(int count) {
  torch::manual_seed(5);
  Batches out;
  for (int i = 0; i < count; ++i) {
    out.emplace_back(torch::randn({16, 33}).to(device()), torch::randint(0, 5, {16}).to(device()));
  }
  return out;
}

EngineOptions engine_options(int stage, bool offload, at::ScalarType dtype) {
  EngineOptions o;
  o.stage = stage;
  // Stage 3 shards every buffer, however small (DeepSpeed's default threshold would keep
  // this test's small buffers gathered).
  o.stage3_param_persistence_threshold = 0;
  o.offload_optimizer.device = offload ? zt::OffloadDevice::kCpu : zt::OffloadDevice::kNone;
  o.compute_dtype = dtype;
  o.optimizer.type =
      offload ? zt::optim::OptimizerKind::kCpuAdam : zt::optim::OptimizerKind::kAdamW;
  o.hyper.lr = 1e-2;
  o.hyper.weight_decay = 0.01;
  o.units = {"a", "b"};
  o.reduce_bucket_size = 1000;  // several buckets per unit
  o.stage3_prefetch_bucket_size = 3000;
  return o;
}

EngineOptions case_options(const EngineCase& c, const std::string& scratch) {
  EngineOptions o = engine_options(c.stage, c.offload, c.dtype);
  o.stage3_param_persistence_threshold = c.persistence;
  if (!c.param.empty()) {
    o.offload_param.device = c.param == "cpu" ? zt::OffloadDevice::kCpu : zt::OffloadDevice::kNvme;
    o.offload_param.pin_memory = true;
    o.offload_param.nvme_path = scratch;
    o.offload_param.max_in_cpu = 0;  // nvme: every shard in files
  }
  if (c.nvme_optimizer) {
    o.offload_optimizer.device = zt::OffloadDevice::kNvme;
    o.offload_optimizer.nvme_path = scratch;
    o.sub_group_size = 700;  // several chunks per rank
  }
  return o;
}

// What a training run leaves to compare: each step's loss, then every parameter (fp32, on the
// CPU).
struct Trace {
  std::vector<torch::Tensor> losses;
  std::map<std::string, torch::Tensor> params;
};

// The reference of the fp32 cases: the same model and batches under torch AdamW.
Trace adamw_trace(const Batches& data) {
  torch::manual_seed(4);
  Mlp model;
  model->to(device());
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-2).weight_decay(0.01));
  Trace t;
  for (const auto& [x, y] : data) {
    opt.zero_grad();
    torch::Tensor loss = torch::cross_entropy_loss(model->forward(x), y);
    loss.backward();
    opt.step();
    t.losses.push_back(loss.detach().cpu());
  }
  for (const auto& p : model->named_parameters()) t.params[p.key()] = p.value().detach().cpu();
  return t;
}

Trace engine_trace(const EngineCase& c, const Batches& data) {
  ScratchDir scratch;
  torch::manual_seed(4);
  Mlp model;
  model->to(device());
  Trace t;
  {
    Engine engine(model.ptr(), case_options(c, scratch.path()), one_rank_comm());
    for (const auto& batch : data) {
      const torch::Tensor& x = batch.first;
      const torch::Tensor& y = batch.second;
      torch::Tensor loss = engine.forward([&] {
        return torch::cross_entropy_loss(model->forward(x.to(c.dtype)).to(torch::kFloat), y);
      });
      engine.backward(loss);
      engine.step();
      t.losses.push_back(loss.detach().cpu());
    }
    Engine::GatheredParameters full(engine);
    for (const auto& p : model->named_parameters()) {
      t.params[p.key()] = p.value().detach().to(torch::kCPU, torch::kFloat);
    }
  }
  return t;
}

struct Tolerance {
  double loss_rtol, loss_atol, param_rtol, param_atol;
};
// fp32 against torch AdamW: the same arithmetic in another order.
constexpr Tolerance kFp32{1e-5, 1e-6, 1e-4, 1e-5};
// bf16 against the bf16 engine without offload: the same operations, so equal up to an ulp of
// bf16 (2^-8 relative) where a kernel's order differs; a shard not written back after a step is
// off by about lr = 1e-2 on values below 0.2, several percent.
constexpr Tolerance kBf16{1e-3, 1e-4, 1e-2, 1e-3};

void expect_same_training(const Trace& got, const Trace& want, const Tolerance& tol) {
  ZT_CHECK(got.losses.size() == want.losses.size(), got.losses.size(), " steps vs ",
           want.losses.size());
  for (size_t i = 0; i < want.losses.size(); ++i) {
    expect_close("loss at step " + std::to_string(i), got.losses[i], want.losses[i], tol.loss_rtol,
                 tol.loss_atol);
  }
  for (const auto& [name, value] : want.params) {
    auto it = got.params.find(name);
    ZT_CHECK(it != got.params.end(), "parameter ", name, " missing");
    expect_close("parameter " + name, it->second, value, tol.param_rtol, tol.param_atol);
  }
}

// Runs every case against its reference: fp32 cases against torch AdamW, bf16 cases against the
// bf16 engine at the same stage without any offload (torch AdamW in fp32 is no tight reference
// for bf16 training; the bf16 engine itself is engine_half's subject).
void run_engine_cases(const std::vector<EngineCase>& list) {
  const Batches data = batches(4);
  const Trace fp32_reference = adamw_trace(data);
  Cases cases;
  for (const EngineCase& c : list) {
    cases.run(case_name(c), [&] {
      if (c.dtype == at::kFloat) {
        expect_same_training(engine_trace(c, data), fp32_reference, kFp32);
        return;
      }
      ZT_CHECK(c.dtype == at::kBFloat16, "no reference for ", c.dtype);
      EngineCase plain;
      plain.stage = c.stage;
      plain.dtype = c.dtype;
      Trace reference;
      try {
        reference = engine_trace(plain, data);
      } catch (const std::exception& e) {
        ZT_THROW("its reference, ", case_name(plain), ", failed: ", first_line(e.what()));
      }
      expect_same_training(engine_trace(c, data), reference, kBf16);
    });
  }
  cases.finish();
}

void check_engine_equivalence() {
  run_engine_cases(
      {{0}, {1}, {2}, {3}, {2, true}, {3, true}, {3, false, "", false, kDeepSpeedPersistence}});
}

// offload_param: the stage-3 shards in pinned host memory or in files, gathered to the GPU per
// unit, with the optimizer on the GPU or on the host.
void check_engine_param_offload() {
  run_engine_cases({{3, false, "cpu"},
                    {3, false, "cpu", false, 0, at::kBFloat16},
                    {3, true, "cpu"},
                    {3, false, "nvme"},
                    {3, true, "nvme"},
                    {3, false, "cpu", false, kDeepSpeedPersistence}});
}

// offload_optimizer nvme: the master and Adam state in files, streamed through host buffers at
// each step, with the model on the GPU (and, last, its shards on NVMe too).
void check_engine_nvme_optimizer() {
  run_engine_cases({{2, true, "", true}, {3, true, "", true}, {3, true, "nvme", true}});
}

void engine_half_case(at::ScalarType dtype, int stage, const Batches& data) {
  torch::manual_seed(4);
  Mlp model;
  model->to(device());
  Engine engine(model.ptr(), engine_options(stage, false, dtype), one_rank_comm());
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
  ZT_CHECK(std::isfinite(last) && last < 0.8 * first, "loss went from ", first, " to ", last,
           " over 40 steps");
  ZT_CHECK(engine.skipped_steps() <= 2, engine.skipped_steps(), " steps skipped for overflow");
}

// bf16 stage 2 with optimizer offload, bf16.check_grad_overflow false: each bucket's host step
// runs at its reduction during backward (ShardedStep::steps_at_reduction), and trains bit for bit
// as the same run whose host steps wait for the step (the check on, no overflow happening).
void engine_step_at_reduction_case(const Batches& data) {
  auto run = [&](bool check_grad_overflow) {
    torch::manual_seed(4);
    Mlp model;
    model->to(device());
    EngineOptions o = engine_options(2, true, at::kBFloat16);
    o.bf16_check_grad_overflow = check_grad_overflow;
    Engine engine(model.ptr(), o, one_rank_comm());
    std::vector<double> losses;
    for (int epoch = 0; epoch < 2; ++epoch) {
      for (const auto& batch : data) {
        torch::Tensor loss = engine.forward([&] {
          return torch::cross_entropy_loss(
              model->forward(batch.first.to(at::kBFloat16)).to(torch::kFloat), batch.second);
        });
        engine.backward(loss);
        engine.step();
        losses.push_back(loss.item<double>());
      }
    }
    std::vector<torch::Tensor> params;
    for (const auto& p : model->parameters()) params.push_back(p.detach().cpu());
    return std::make_pair(losses, params);
  };
  const auto [early_losses, early_params] = run(false);
  const auto [losses, params] = run(true);
  for (size_t i = 0; i < losses.size(); ++i) {
    ZT_CHECK(early_losses[i] == losses[i], "step ", i, ": loss ", early_losses[i],
             " with the host steps at reduction, ", losses[i], " in the step");
  }
  for (size_t i = 0; i < params.size(); ++i) {
    expect_equal("parameter " + std::to_string(i) + " (host steps at reduction vs in the step)",
                 early_params[i], params[i]);
  }
}

void check_engine_half() {
  const Batches data = batches(8);
  Cases cases;
  for (at::ScalarType dtype : {at::kBFloat16, at::kHalf}) {
    for (int stage : {0, 2, 3}) {
      cases.run(std::string(c10::toString(dtype)) + " stage " + std::to_string(stage),
                [&] { engine_half_case(dtype, stage, data); });
    }
  }
  cases.run("bf16 stage 2 offload, host steps at reduction",
            [&] { engine_step_at_reduction_case(data); });
  cases.finish();
}

// ---- fused_cross_entropy ---------------------------------------------------------------------

// The loss and gradient LibTorch computes in float64 from the same (already rounded) logits.
struct CrossEntropyReference {
  torch::Tensor mean, sum, grad_of_mean;
};

CrossEntropyReference cross_entropy_reference(const torch::Tensor& logits,
                                              const torch::Tensor& labels) {
  torch::Tensor x = logits.to(torch::kCPU, torch::kDouble).requires_grad_(true);
  const torch::Tensor y = labels.cpu();
  CrossEntropyReference r;
  r.mean = at::cross_entropy_loss(x, y, {}, at::Reduction::Mean, -100);
  r.sum = at::cross_entropy_loss(x.detach(), y, {}, at::Reduction::Sum, -100);
  r.mean.backward();
  r.grad_of_mean = x.grad();
  return r;
}

// Rows x vocab logits of dtype on the device (some -inf, some large), labels with ignored rows.
std::pair<torch::Tensor, torch::Tensor> cross_entropy_inputs(int64_t rows, int64_t vocab,
                                                             at::ScalarType dtype) {
  torch::Tensor x = torch::randn({rows, vocab}) * 3.0;
  if (vocab > 4) {
    x.index_put_({0, 1}, -std::numeric_limits<float>::infinity());
    x.index_put_({rows - 1, 2}, 40.0);
  }
  torch::Tensor y = torch::randint(0, vocab, {rows}, torch::kLong);
  y[0] = 0;  // not the -inf logit: an infinite loss compares as NaN
  for (int64_t r = 2; r < rows; r += 5) y[r] = -100;
  return {x.to(dtype).to(device()), y.to(device())};
}

// rtol from the dtype's rounding of the gradient (half an ulp, with room for the fp32 error); atol
// from fp32's error in softmax - 1 where one class dominates a row (a few ulps of the row's lse,
// relative to the largest entry, about the upstream scale), plus fp16's subnormal spacing (softmax
// over tokens falls below its smallest normal for a large vocabulary).
std::pair<double, double> gradient_tolerance(at::ScalarType dtype, const torch::Tensor& ref) {
  const double from_lse = 4e-6 * ref.abs().max().item<double>();
  if (dtype == at::kBFloat16) return {1.0 / 128, from_lse};
  if (dtype == at::kHalf) return {1.0 / 1024, from_lse + 1e-7};
  return {1e-4, from_lse};
}

void cross_entropy_case(int64_t rows, int64_t vocab, at::ScalarType dtype) {
  auto [x, y] = cross_entropy_inputs(rows, vocab, dtype);
  ZT_CHECK(ops::fused_cross_entropy(x), "the fused kernel is not taken for ", x.device(), " ",
           x.scalar_type());
  const CrossEntropyReference ref = cross_entropy_reference(x, y);
  torch::Tensor xg = x.clone().requires_grad_(true);
  torch::Tensor mean = ops::token_cross_entropy(xg, y, ops::TokenReduction::kMean);
  mean.backward();
  expect_close("mean loss", mean, ref.mean, 1e-5, 0);
  expect_close("sum loss", ops::token_cross_entropy(x, y, ops::TokenReduction::kSum), ref.sum, 1e-5,
               0);
  const auto [rtol, atol] = gradient_tolerance(dtype, ref.grad_of_mean);
  ZT_CHECK(xg.grad().scalar_type() == dtype, "gradient in ", xg.grad().scalar_type());
  expect_close("gradient of the mean", xg.grad(), ref.grad_of_mean, rtol, atol);
  // The recomputing backward's entry point: scale times the gradient of the sum.
  const double scale = 0.37;
  const torch::Tensor counted = y.ne(-100).sum().to(torch::kDouble).cpu();
  const torch::Tensor of_sum = ref.grad_of_mean * counted * scale;
  const auto [rtol_sum, atol_sum] = gradient_tolerance(dtype, of_sum);
  expect_close(
      "token_cross_entropy_grad",
      ops::token_cross_entropy_grad(x, y, torch::full({}, scale, x.options().dtype(torch::kFloat))),
      of_sum, rtol_sum, atol_sum);
}

void check_fused_cross_entropy() {
  torch::manual_seed(5);
  Cases cases;
  for (at::ScalarType dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
    for (auto [rows, vocab] : {std::pair<int64_t, int64_t>{37, 50257}, {300, 7}, {4, 1}}) {
      cases.run(std::string(c10::toString(dtype)) + " " + std::to_string(rows) + "x" +
                    std::to_string(vocab),
                [&] { cross_entropy_case(rows, vocab, dtype); });
    }
  }
  cases.run("every row ignored", [] {
    torch::Tensor x = torch::randn({3, 11}, torch::kBFloat16).to(device()).requires_grad_(true);
    torch::Tensor y = torch::full({3}, -100, torch::kLong).to(device());
    torch::Tensor mean = ops::token_cross_entropy(x, y, ops::TokenReduction::kMean);
    ZT_CHECK(std::isnan(mean.item<double>()), "mean over no token is ", mean.item<double>());
    ZT_CHECK(ops::token_cross_entropy(x, y, ops::TokenReduction::kSum).item<double>() == 0,
             "sum over no token is not 0");
    ops::token_cross_entropy(x, y, ops::TokenReduction::kSum).backward();
    ZT_CHECK(x.grad().abs().sum().item<double>() == 0, "ignored rows got a gradient");
  });
  cases.run("labels on the host", [] {
    torch::Tensor x = torch::randn({2, 11}).to(device());
    bool refused = false;
    try {
      ops::token_cross_entropy(x, torch::tensor({3, 4}, torch::kLong), ops::TokenReduction::kSum);
    } catch (const Error&) {
      refused = true;
    }
    ZT_CHECK(refused, "host labels with device logits were not refused");
  });
  cases.run("label out of range", [] {
    torch::Tensor x = torch::randn({2, 11}).to(device());
    torch::Tensor y = torch::tensor({3, 11}, torch::kLong).to(device());
    const double loss = ops::token_cross_entropy(x, y, ops::TokenReduction::kSum).item<double>();
    ZT_CHECK(std::isnan(loss), "a label past the vocabulary gave loss ", loss, ", not NaN");
  });
  cases.run("strided logits", [] {
    torch::Tensor wide = torch::randn({9, 40}, torch::kBFloat16).to(device());
    torch::Tensor x = wide.narrow(1, 3, 31);  // rows 40 elements apart
    torch::Tensor y = torch::randint(0, 31, {9}, torch::kLong).to(device());
    expect_close("strided vs contiguous",
                 ops::token_cross_entropy(x, y, ops::TokenReduction::kMean),
                 ops::token_cross_entropy(x.contiguous(), y, ops::TokenReduction::kMean), 0, 0);
  });
  cases.finish();
}

}  // namespace

void set_device(const c10::Device& device) {
  target() = device;
}

const c10::Device& device() {
  return target();
}

std::string device_unavailable() {
  if (!device().is_cuda()) {
    const c10::impl::VirtualGuardImpl guard(device().type());
    return guard.deviceCount() > device().index() ? ""
                                                  : "no " + device().str() + " in this process";
  }
  const cuda::Kernels* k = cuda::kernels();
  if (k == nullptr) return cuda::load_error();
  if (k->device_count() == 0) return "the CUDA plugin loaded but sees no GPU";
  return "";
}

const std::vector<Check>& all_checks() {
  static const std::vector<Check> checks = {
      {"nccl_one_rank", check_nccl},
      {"fused_adam", check_fused_adam, /*cuda_kernels=*/true},
      {"adam8bit", check_adam8bit, /*cuda_kernels=*/true},
      {"engine_equivalence", check_engine_equivalence},
      {"engine_param_offload", check_engine_param_offload},
      {"engine_nvme_optimizer", check_engine_nvme_optimizer},
      {"engine_half", check_engine_half},
      {"fused_cross_entropy", check_fused_cross_entropy, /*cuda_kernels=*/true},
  };
  return checks;
}

}  // namespace zt::gpu_checks
