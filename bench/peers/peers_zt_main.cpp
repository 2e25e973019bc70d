// zt_bench_peers: the zerotorch side of bench/peers (zerotorch against PyTorch DDP,
// ZeroRedundancyOptimizer and FSDP2; the driver is bench/peers/run_peers.py).
//
// Two modes, both run by every rank of an mpirun job (2 ranks in the benchmark):
//
//   mpirun -np 2 zt_bench_peers --export DIR --shard S.ztt [--steps N --batch-size B ...]
//     Builds the GPT example (models/gpt, seeded), wraps it in a stage-0 engine, and writes
//       DIR/init.safetensors   the engine's initial fp32 weights, through the checkpoint writer
//                              and zt-consolidate's safetensors writer
//                              (core/checkpoint/checkpoint.h)
//       DIR/batches_r<r>.bin   the N batches LengthBucketedSampler + Collator give rank r
//       DIR/meta.json          model shape, optimizer hyper-parameters, a checksum of the weights
//     Every implementation then trains from these same weights on these same batches.
//
//   mpirun -np 2 zt_bench_peers --run DIR --stage S [--offload] [--json FILE]
//     Trains on DIR's batches with zt::Engine at ZeRO stage S and writes one JSON row: the loss of
//     every step, tokens/s over the timed steps (after --warmup), forward / backward / comm wait /
//     optimizer ms (medians), peak RSS and the engine's model-state bytes of every rank.
//     bench/multinode runs it on two network-namespace nodes through ztrun (--backend gloo) with
//     --mics-shard-size and --link-counter (the bytes the inter-node link carried per step).
//
// Batch file layout (little-endian int64 throughout):
//   "ZTPEERS1" (8 bytes), num_steps, then per step: B, T, input_ids (B*T), attention_mask
//   (B*T), labels (B*T, -100 = ignored).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/resource.h>
#include <vector>

#include <torch/torch.h>

#include "base/error.h"
#include "base/logging.h"
#include "base/main_guard.h"
#include "bench/common/bench_stats.h"
#include "core/checkpoint/checkpoint.h"
#include "core/config/cli_options.h"
#include "core/engine.h"
#include "data/batch_sampler.h"
#include "data/collator.h"
#include "data/loader.h"
#include "data/token_dataset.h"
#include "models/gpt/gpt_model.h"
#include "parallel/dist.h"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace zt::bench {
namespace {

constexpr char kBatchMagic[9] = "ZTPEERS1";

struct Args {
  std::string export_dir, run_dir, shard, json, backend = "auto", label, link_counter;
  int64_t steps = 20, batch_size = 8, max_length = 64, n_layer = 2, n_head = 2, d_model = 64;
  int64_t seed = 1234, warmup = 2, bucket_elements = 1 << 20, threads = 1;
  double lr = 1e-3, weight_decay = 0.1, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  int stage = 0;
  int mics_shard_size = -1;
  int hpz = 1;
  int64_t reuse_distance = EngineOptions().stage3_max_reuse_distance;
  bool quantized_weights = false;
  bool quantized_gradients = false;
  bool mics_hierarchical_gather = false;
  bool offload = false;
};

struct HostBatch {
  int64_t b = 0, t = 0;
  torch::Tensor input_ids, attention_mask, labels;  // (B, T) int64 each
  int64_t num_tokens() const { return attention_mask.sum().item<int64_t>(); }
};

// ---- small helpers -----------------------------------------------------------------------

// CPU seconds of the whole process (every thread: compute, gloo / MPI progress threads).
double process_cpu_seconds() {
  struct rusage u {};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// A byte counter in a file (a network interface's statistics/tx_bytes), or 0 without one.
double read_counter(const std::string& path) {
  if (path.empty()) return 0;
  std::ifstream f(path);
  double v = 0;
  ZT_CHECK(f >> v, "cannot read the counter ", path);
  return v;
}

double ms_between(std::chrono::steady_clock::time_point a,
                  std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// One value per rank, gathered on every rank (all_reduce of a vector with one slot filled).
std::vector<double> per_rank(dist::Communicator& comm, double value) {
  torch::Tensor t = torch::zeros({comm.size()}, torch::kDouble);
  t[comm.rank()] = value;
  comm.all_reduce(t)->wait();
  return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
}

std::string json_list(const std::vector<double>& v, int precision = 17) {
  std::ostringstream s;
  s.precision(precision);
  s << '[';
  for (size_t i = 0; i < v.size(); ++i) s << (i ? "," : "") << v[i];
  s << ']';
  return s.str();
}

// FNV-1a over the raw fp32 bytes of every parameter in model order: the Python side checks the
// safetensors it loads against it, and --run checks its freshly built model against it.
uint64_t weights_fnv64(torch::nn::Module& model) {
  uint64_t h = 1469598103934665603ull;
  for (const auto& p : model.named_parameters()) {
    torch::Tensor t = p.value().detach().to(torch::kFloat).contiguous();
    const auto* bytes = static_cast<const unsigned char*>(t.data_ptr());
    for (int64_t i = 0; i < t.numel() * 4; ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  }
  return h;
}

models::GptShape shape_of(const Args& a, int64_t vocab) {
  models::GptShape s;
  s.n_layer = a.n_layer;
  s.n_head = a.n_head;
  s.d_model = a.d_model;
  s.vocab_size = vocab;
  s.max_seq_len = a.max_length;
  return s;
}

EngineOptions engine_options(const Args& a, const models::Gpt& model) {
  EngineOptions o;
  read_environment_switches(o);  // ZT_HIERARCHICAL_REDUCE, ZT_HOST_CACHE, as the programs read them
  o.stage = a.stage;
  o.mics_shard_size = a.mics_shard_size;
  o.zero_hpz_partition_size = a.hpz;
  o.stage3_max_reuse_distance = a.reuse_distance;
  o.zero_quantized_weights = a.quantized_weights;
  o.zero_quantized_gradients = a.quantized_gradients;
  o.mics_hierarchical_params_gather = a.mics_hierarchical_gather;
  o.stage3_param_persistence_threshold = 0;  // stage 3 shards every buffer, as FSDP2
  o.offload_optimizer.device = a.offload ? zt::OffloadDevice::kCpu : zt::OffloadDevice::kNone;
  // What engine_options_from_config picks: the fused SIMD CPU Adam for offload, else AdamW.
  o.optimizer.type =
      a.offload ? zt::optim::OptimizerKind::kCpuAdam : zt::optim::OptimizerKind::kAdamW;
  o.optimizer.adamw_mode = true;
  o.hyper.lr = a.lr;
  o.hyper.weight_decay = a.weight_decay;  // every parameter, as torch.optim.AdamW without groups
  o.hyper.beta1 = a.beta1;
  o.hyper.beta2 = a.beta2;
  o.hyper.eps = a.eps;
  o.reduce_bucket_size = a.bucket_elements;
  o.units = model->unit_names();
  return o;
}

// ---- batches -------------------------------------------------------------------------------

void write_i64(std::ofstream& f, int64_t v) {
  f.write(reinterpret_cast<const char*>(&v), 8);
}

void write_tensor(std::ofstream& f, const torch::Tensor& t) {
  torch::Tensor c = t.to(torch::kLong).contiguous();
  f.write(static_cast<const char*>(c.data_ptr()), c.numel() * 8);
}

int64_t read_i64(std::ifstream& f) {
  int64_t v = 0;
  f.read(reinterpret_cast<char*>(&v), 8);
  return v;
}

torch::Tensor read_tensor(std::ifstream& f, int64_t b, int64_t t) {
  torch::Tensor x = torch::empty({b, t}, torch::kLong);
  f.read(static_cast<char*>(x.data_ptr()), b * t * 8);
  return x;
}

std::string batch_path(const std::string& dir, int rank) {
  return dir + "/batches_r" + std::to_string(rank) + ".bin";
}

// The first `steps` batches this rank's sampler yields, epochs chained (as train_gpt does).
std::vector<data::Batch> sample_batches(const data::TokenDataset& ds, const Args& a, int rank,
                                        int world) {
  data::SamplerOptions so;
  so.batch_size = a.batch_size;
  so.seed = static_cast<uint64_t>(a.seed);
  so.tail = data::TailPolicy::kDrop;
  so.rank = rank;
  so.world_size = world;
  so.max_length = a.max_length + 1;  // the shift turns max_length + 1 tokens into max_length
  data::LengthBucketedSampler sampler(ds.lengths(), so);
  data::CollatorOptions co;
  co.pad_id = ds.pad_id();  // the tokenizer's, from the shard
  co.max_length = a.max_length;
  co.causal_lm_shift = true;
  data::Loader loader(ds, sampler, data::Collator(co), data::LoaderOptions{.num_workers = 0});
  std::vector<data::Batch> out;
  int64_t epoch = 0;
  loader.set_epoch(epoch);
  ZT_CHECK(loader.num_batches() > 0, "shard ", ds.path(), " gives no batch of ", a.batch_size,
           " samples per rank");
  while (static_cast<int64_t>(out.size()) < a.steps) {
    auto b = loader.next();
    if (!b) {
      loader.set_epoch(++epoch);
      continue;
    }
    out.push_back(std::move(*b));
  }
  return out;
}

void write_batches(const std::string& path, const std::vector<data::Batch>& batches) {
  std::ofstream f(path, std::ios::binary);
  ZT_CHECK(f.good(), "cannot write ", path);
  f.write(kBatchMagic, 8);
  write_i64(f, static_cast<int64_t>(batches.size()));
  for (const auto& b : batches) {
    write_i64(f, b.input_ids.size(0));
    write_i64(f, b.input_ids.size(1));
    write_tensor(f, b.input_ids);
    write_tensor(f, b.attention_mask);
    write_tensor(f, b.labels);
  }
  ZT_CHECK(f.good(), "write to ", path, " failed");
}

std::vector<HostBatch> read_batches(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  ZT_CHECK(f.good(), "cannot read ", path, " (run --export first)");
  char magic[8];
  f.read(magic, 8);
  ZT_CHECK(f.good() && std::memcmp(magic, kBatchMagic, 8) == 0, path, " is not a batch file");
  const int64_t n = read_i64(f);
  std::vector<HostBatch> out(n);
  for (auto& b : out) {
    b.b = read_i64(f);
    b.t = read_i64(f);
    ZT_CHECK(f.good() && b.b > 0 && b.t > 0, path, ": bad batch header");
    b.input_ids = read_tensor(f, b.b, b.t);
    b.attention_mask = read_tensor(f, b.b, b.t);
    b.labels = read_tensor(f, b.b, b.t);
  }
  ZT_CHECK(f.good(), path, " is truncated");
  return out;
}

// ---- meta.json -------------------------------------------------------------------------------

void write_meta(const std::string& path, const Args& a, const models::GptShape& s, int world,
                int64_t params, uint64_t fnv) {
  std::ofstream f(path);
  ZT_CHECK(f.good(), "cannot write ", path);
  f.precision(17);
  f << "{\"n_layer\":" << s.n_layer << ",\"n_head\":" << s.n_head << ",\"d_model\":" << s.d_model
    << ",\"vocab_size\":" << s.vocab_size << ",\"max_seq_len\":" << s.max_seq_len
    << ",\"steps\":" << a.steps << ",\"batch_size\":" << a.batch_size << ",\"world_size\":" << world
    << ",\"seed\":" << a.seed << ",\"lr\":" << a.lr << ",\"weight_decay\":" << a.weight_decay
    << ",\"beta1\":" << a.beta1 << ",\"beta2\":" << a.beta2 << ",\"eps\":" << a.eps
    << ",\"parameters\":" << params << ",\"bucket_elements\":" << a.bucket_elements
    << ",\"weights_fnv64\":\"" << std::hex << fnv << std::dec << "\"}\n";
}

// Reads `"key":value` from meta.json (our own flat file: no nesting, no strings with commas).
std::string meta_value(const std::string& text, const std::string& key) {
  const std::string k = "\"" + key + "\":";
  size_t p = text.find(k);
  ZT_CHECK(p != std::string::npos, "meta.json has no key ", key);
  p += k.size();
  size_t e = text.find_first_of(",}", p);
  std::string v = text.substr(p, e - p);
  if (!v.empty() && v.front() == '"') v = v.substr(1, v.size() - 2);
  return v;
}

// --run takes shape and hyper-parameters from the export, so every side trains the same thing.
void load_meta(const std::string& dir, Args& a, int64_t& vocab, std::string& fnv) {
  std::ifstream f(dir + "/meta.json");
  ZT_CHECK(f.good(), "cannot read ", dir, "/meta.json (run --export first)");
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string t = ss.str();
  a.n_layer = std::stoll(meta_value(t, "n_layer"));
  a.n_head = std::stoll(meta_value(t, "n_head"));
  a.d_model = std::stoll(meta_value(t, "d_model"));
  a.max_length = std::stoll(meta_value(t, "max_seq_len"));
  a.seed = std::stoll(meta_value(t, "seed"));
  a.lr = std::stod(meta_value(t, "lr"));
  a.weight_decay = std::stod(meta_value(t, "weight_decay"));
  a.beta1 = std::stod(meta_value(t, "beta1"));
  a.beta2 = std::stod(meta_value(t, "beta2"));
  a.eps = std::stod(meta_value(t, "eps"));
  a.bucket_elements = std::stoll(meta_value(t, "bucket_elements"));
  vocab = std::stoll(meta_value(t, "vocab_size"));
  fnv = meta_value(t, "weights_fnv64");
}

std::string hex(uint64_t v) {
  std::ostringstream s;
  s << std::hex << v;
  return s.str();
}

// ---- modes ---------------------------------------------------------------------------------

int export_mode(const Args& a, const std::shared_ptr<dist::Communicator>& comm) {
  ZT_CHECK(!a.shard.empty(), "--export needs --shard");
  const int rank = comm->rank(), world = comm->size();
  fs::create_directories(a.export_dir);
  data::TokenDataset ds(a.shard);
  write_batches(batch_path(a.export_dir, rank), sample_batches(ds, a, rank, world));

  torch::manual_seed(static_cast<uint64_t>(a.seed));
  models::Gpt model(shape_of(a, std::max<int64_t>(ds.vocab_size(), 1)));
  Args stage0 = a;
  stage0.stage = 0;
  stage0.offload = false;
  Engine engine(model.ptr(), engine_options(stage0, model), comm);
  const uint64_t fnv = weights_fnv64(*model);
  // The engine's initial state, through the checkpoint writer, then zt-consolidate's
  // safetensors writer: what PyTorch loads is exactly what zerotorch starts from.
  const std::string ckpt = a.export_dir + "/init_checkpoint";
  save_checkpoint(engine, ckpt, "init");
  if (rank == 0) {
    consolidate_to_safetensors(ckpt, "init", a.export_dir + "/init.safetensors");
    write_meta(a.export_dir + "/meta.json", a, model->shape(), world, model->num_parameters(), fnv);
    fs::remove_all(ckpt);
    ZT_LOG_INFO("peers: exported ", a.steps, " batches per rank, ", model->num_parameters(),
                " parameters (weights fnv64 ", hex(fnv), ") to ", a.export_dir);
  }
  comm->barrier()->wait();
  return 0;
}

int run_mode(Args a, const std::shared_ptr<dist::Communicator>& comm) {
  const int rank = comm->rank(), world = comm->size();
  const double baseline_rss = read_status_kib("VmRSS:") * 1024.0;
  int64_t vocab = 0;
  std::string want_fnv;
  load_meta(a.run_dir, a, vocab, want_fnv);
  std::vector<HostBatch> batches = read_batches(batch_path(a.run_dir, rank));
  ZT_CHECK(static_cast<int64_t>(batches.size()) > a.warmup, "--warmup ", a.warmup,
           " leaves no timed step of ", batches.size());

  torch::manual_seed(static_cast<uint64_t>(a.seed));
  models::Gpt model(shape_of(a, vocab));
  const std::string got_fnv = hex(weights_fnv64(*model));
  ZT_CHECK(got_fnv == want_fnv, "initial weights (fnv64 ", got_fnv, ") differ from the export's (",
           want_fnv, "): rebuild the export with this binary");
  Engine engine(model.ptr(), engine_options(a, model), comm);

  std::vector<double> losses, fwd, bwd, opt, wait, step_ms;
  double timed_tokens = 0;
  // Only one rank per node reads its node's link counter (the others would count it again).
  const bool reads_link = !a.link_counter.empty() && dist::Env::discover().local_rank == 0;
  double link_start = 0;
  auto t_timed = std::chrono::steady_clock::now();
  double cpu_timed = 0;
  for (size_t i = 0; i < batches.size(); ++i) {
    const HostBatch& b = batches[i];
    if (static_cast<int64_t>(i) == a.warmup) {
      comm->barrier()->wait();
      t_timed = std::chrono::steady_clock::now();
      cpu_timed = process_cpu_seconds();
      if (reads_link) link_start = read_counter(a.link_counter);
    }
    engine.reset_comm_wait();
    const auto t0 = std::chrono::steady_clock::now();
    torch::Tensor loss = engine.forward([&] {
      return models::GptImpl::loss(model->forward(b.input_ids, b.attention_mask), b.labels);
    });
    const auto t1 = std::chrono::steady_clock::now();
    engine.backward(loss);
    const auto t2 = std::chrono::steady_clock::now();
    engine.step();
    const auto t3 = std::chrono::steady_clock::now();
    // Mean over ranks of each rank's mean token loss: what DDP's averaged gradient descends.
    torch::Tensor l = torch::tensor({loss.item<double>(), double(b.num_tokens())}, torch::kDouble);
    comm->all_reduce(l)->wait();
    losses.push_back(l[0].item<double>() / world);
    if (static_cast<int64_t>(i) < a.warmup) continue;
    timed_tokens += l[1].item<double>();
    fwd.push_back(ms_between(t0, t1));
    bwd.push_back(ms_between(t1, t2));
    opt.push_back(ms_between(t2, t3));
    step_ms.push_back(ms_between(t0, t3));
    wait.push_back(engine.comm_wait_seconds() * 1e3);
  }
  const double wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_timed).count();
  const double link_bytes = reads_link ? read_counter(a.link_counter) - link_start : 0;
  const int64_t timed_steps = static_cast<int64_t>(batches.size()) - a.warmup;
  const std::vector<double> cpu_ms =
      per_rank(*comm, (process_cpu_seconds() - cpu_timed) * 1e3 / timed_steps);
  // The wall clock of rank 0 decides (ranks meet at every step's loss all_reduce anyway).
  const double tokens_per_s = timed_tokens / per_rank(*comm, wall_s)[0];
  const MemoryReport mem = engine.memory();
  const std::vector<double> rss = per_rank(*comm, read_status_kib("VmHWM:") * 1024.0);
  const std::vector<double> base = per_rank(*comm, baseline_rss);
  const std::vector<double> state = per_rank(*comm, double(mem.model_state_bytes()));
  const std::vector<double> wait_all = per_rank(*comm, median(wait));
  std::vector<double> link = per_rank(*comm, link_bytes);
  double link_total = 0;
  for (double v : link) link_total += v;

  if (rank == 0) {
    std::ostringstream row;
    row.precision(10);
    const std::string label =
        !a.label.empty() ? a.label
                         : "zt stage " + std::to_string(a.stage) + (a.offload ? " + offload" : "");
    row << "{\"impl\":\"zerotorch\",\"config\":\"" << label << "\",\"stage\":" << a.stage
        << ",\"offload\":" << (a.offload ? "true" : "false") << ",\"backend\":\"" << comm->backend()
        << "\",\"ranks\":" << world << ",\"threads_per_rank\":" << a.threads
        << ",\"steps\":" << batches.size() << ",\"warmup_steps\":" << a.warmup
        << ",\"timed_tokens\":" << timed_tokens << ",\"wall_s\":" << wall_s
        << ",\"tokens_per_s\":" << tokens_per_s << ",\"forward_ms\":" << median(fwd)
        << ",\"backward_ms\":" << median(bwd) << ",\"comm_wait_ms\":" << median(wait)
        << ",\"comm_wait_ms_per_rank\":" << json_list(wait_all, 6)
        << ",\"mics_shard_size\":" << a.mics_shard_size << ",\"hpz_partition_size\":" << a.hpz
        << ",\"quantized_weights\":" << (a.quantized_weights ? "true" : "false")
        << ",\"quantized_gradients\":" << (a.quantized_gradients ? "true" : "false")
        << ",\"mics_hierarchical_params_gather\":"
        << (a.mics_hierarchical_gather ? "true" : "false")
        << ",\"link_bytes_per_step\":" << link_total / timed_steps
        << ",\"optimizer_ms\":" << median(opt) << ",\"step_ms\":" << median(step_ms)
        << ",\"cpu_ms_per_step_per_rank\":" << json_list(cpu_ms, 6)
        << ",\"peak_rss_bytes\":" << *std::max_element(rss.begin(), rss.end())
        << ",\"peak_rss_bytes_per_rank\":" << json_list(rss, 12)
        << ",\"baseline_rss_bytes_per_rank\":" << json_list(base, 12)
        << ",\"model_state_bytes\":" << mem.model_state_bytes()
        << ",\"model_state_bytes_per_rank\":" << json_list(state, 12)
        << ",\"peak_gathered_param_bytes\":" << mem.peak_gathered_param_bytes
        << ",\"losses\":" << json_list(losses) << "}";
    if (!a.json.empty()) {
      std::ofstream f(a.json, std::ios::app);
      ZT_CHECK(f.good(), "cannot write --json file ", a.json);
      f << row.str() << "\n";
    }
    std::printf(
        "%-22s %10.0f tokens/s | fwd %.1f bwd %.1f wait %.1f opt %.1f ms | peak RSS %.0f MiB"
        " | state %.2f MiB/rank | last loss %.6f\n",
        label.c_str(), tokens_per_s, median(fwd), median(bwd), median(wait), median(opt),
        *std::max_element(rss.begin(), rss.end()) / 1048576.0, mem.model_state_bytes() / 1048576.0,
        losses.back());
  }
  comm->barrier()->wait();
  return 0;
}

int run(int argc, char** argv) {
  CliOptions cli("zt_bench_peers",
                 "The zerotorch side of bench/peers: --export the shared weights and batches, or "
                 "--run one ZeRO configuration on them (see bench/peers/README.md).",
                 CliOptionsSpec{.config = false, .config_required = false});
  Args a;
  cli.add()("export", po::value(&a.export_dir), "write weights, batches and meta.json to DIR")(
      "run", po::value(&a.run_dir), "train on the export in DIR")("shard", po::value(&a.shard),
                                                                  "--export: token shard (.ztt)")(
      "steps", po::value(&a.steps)->default_value(a.steps), "--export: batches per rank")(
      "batch-size", po::value(&a.batch_size)->default_value(a.batch_size),
      "--export: samples per batch per rank")(
      "max-length", po::value(&a.max_length)->default_value(a.max_length),
      "--export: input tokens per sample at most (= model max_seq_len)")(
      "n-layer", po::value(&a.n_layer)->default_value(a.n_layer), "--export")(
      "n-head", po::value(&a.n_head)->default_value(a.n_head), "--export")(
      "d-model", po::value(&a.d_model)->default_value(a.d_model), "--export")(
      "seed", po::value(&a.seed)->default_value(a.seed), "--export: model init and sampler seed")(
      "lr", po::value(&a.lr)->default_value(a.lr), "--export: AdamW lr (constant)")(
      "weight-decay", po::value(&a.weight_decay)->default_value(a.weight_decay), "--export")(
      "bucket-elements", po::value(&a.bucket_elements)->default_value(a.bucket_elements),
      "--export: gradient bucket size in elements (DDP's bucket_cap_mb is set to match)")(
      "stage", po::value(&a.stage)->default_value(0), "--run: ZeRO stage 0-3")(
      "mics-shard-size", po::value(&a.mics_shard_size)->default_value(-1),
      "--run: stage 3 hybrid sharding group size (zero_optimization.mics_shard_size)")(
      "mics-hierarchical-gather", po::bool_switch(&a.mics_hierarchical_gather),
      "--run: a shard group over several nodes gathers across them, then in the node "
      "(zero_optimization.mics_hierarchical_params_gather)")(
      "hpz-partition-size", po::value(&a.hpz)->default_value(1),
      "--run: stage 3 ZeRO++ hpZ group size (zero_optimization.zero_hpz_partition_size)")(
      "stage3-max-reuse-distance", po::value(&a.reuse_distance)->default_value(a.reuse_distance),
      "--run: stage 3 keeps a layer gathered for its backward when it is used again within this "
      "many elements (zero_optimization.stage3_max_reuse_distance; 0: released after its "
      "forward)")(
      "quantized-weights", po::bool_switch(&a.quantized_weights),
      "--run: stage 3 ZeRO++ qwZ, int8 weight gathers (zero_optimization.zero_quantized_weights)")(
      "quantized-gradients", po::bool_switch(&a.quantized_gradients),
      "--run: stage 3 ZeRO++ qgZ, int8 gradient all-to-alls across nodes "
      "(zero_optimization.zero_quantized_gradients)")(
      "link-counter", po::value(&a.link_counter),
      "--run: a byte counter file (e.g. /sys/class/net/IF/statistics/tx_bytes) each node's "
      "local rank 0 reads around the timed steps; the JSON row gets link_bytes_per_step")(
      "offload", po::bool_switch(&a.offload), "--run: optimizer offload (CpuAdam)")(
      "warmup", po::value(&a.warmup)->default_value(a.warmup), "--run: untimed first steps")(
      "threads", po::value(&a.threads)->default_value(a.threads), "intra-op threads per rank")(
      "backend", po::value(&a.backend)->default_value(a.backend), "mpi | gloo | auto")(
      "label", po::value(&a.label), "--run: the row's config name")(
      "json", po::value(&a.json), "--run: append the result row to this JSON-lines file");
  if (!cli.parse(argc, argv)) return 0;
  ZT_CHECK(a.export_dir.empty() != a.run_dir.empty(), "give exactly one of --export and --run");
  ZT_CHECK(a.stage >= 0 && a.stage <= 3, "--stage must be 0..3, got ", a.stage);
  at::set_num_threads(static_cast<int>(a.threads));
  dist::CommOptions copt;
  copt.backend = dist::parse_backend(a.backend);
  copt.timeout = std::chrono::minutes(5);
  auto comm = dist::create_communicator(copt);
  return a.export_dir.empty() ? run_mode(a, comm) : export_mode(a, comm);
}

}  // namespace
}  // namespace zt::bench

int main(int argc, char** argv) {
  return zt::run_main("zt_bench_peers", [&] { return zt::bench::run(argc, argv); });
}
