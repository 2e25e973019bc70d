// zt_bench_batching: what smart batching saves on a pre-tokenized corpus.
//
//   zt_bench_batching --shard kjv_train.ztt --batch-size 24 [--max-length 0 = p99] [--json out]
//
// For one epoch of the shard, per strategy: batches, tokens the model processes (B * T summed
// over batches), real tokens, padding fraction, and the saving against fixed padding:
//   fixed padding     random batches, every sample padded (or truncated) to max_length
//   dynamic, random   random batches, padded to the batch's longest sample
//   bucketed          LengthBucketedSampler, padded to the batch's longest sample
//   bucketed, wide    the same with larger mega-batches (less padding, less randomness)
//   bucketed, budget  LengthBucketedSampler with max_tokens = batch_size * max_length
// Then the Loader's batches per second (collating real tensors) with 0 and N worker threads,
// interleaved over several epochs, medians reported: this machine is shared and noisy. With
// --step-us the consumer spends that long per batch, as a training step would: with workers the
// collation hides behind it (batches/s -> 1e6 / step_us), without them it adds to it.

#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/main_guard.h"
#include "bench/common/bench_stats.h"
#include "data/batch_sampler.h"
#include "data/length_stats.h"
#include "data/loader.h"
#include "data/token_dataset.h"

namespace po = boost::program_options;
using namespace zt::data;
using zt::bench::upper_median;

namespace {

struct Row {
  std::string strategy;
  int64_t batches = 0;
  int64_t tokens_processed = 0;
  int64_t real_tokens = 0;
  double padding_fraction = 0;
  double saving_vs_fixed_pct = 0;
};

// Dynamic padding: each batch costs B * T, T its longest (capped) sample.
Row measure(const std::string& name, const BatchSampler& s, bool fixed, int64_t max_length) {
  Row r;
  r.strategy = name;
  for (const auto& step : s.steps()) {
    for (const auto& b : step) {
      ++r.batches;
      const int64_t t = fixed ? max_length : s.padded_length(b);
      r.tokens_processed += static_cast<int64_t>(b.size()) * t;
      for (int64_t i : b)
        r.real_tokens += std::min(s.lengths()[static_cast<size_t>(i)], max_length);
    }
  }
  r.padding_fraction =
      1.0 - static_cast<double>(r.real_tokens) / static_cast<double>(r.tokens_processed);
  return r;
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o;
}

int run(const po::variables_map& vm) {
  const std::string shard = vm["shard"].as<std::string>();
  const int64_t batch_size = vm["batch-size"].as<int64_t>();
  const int workers = vm["workers"].as<int>();
  const int epochs = vm["epochs"].as<int>();
  const auto seed = vm["seed"].as<uint64_t>();
  const auto step_us = vm["step-us"].as<int64_t>();

  TokenDataset ds(shard);
  const std::vector<int64_t> lengths = ds.lengths();
  const LengthStats stats = summarize_lengths(lengths);
  int64_t max_length = vm["max-length"].as<int64_t>();
  if (max_length <= 0) max_length = stats.p99;
  std::printf("corpus %s: %s\n", shard.c_str(), stats.to_string().c_str());
  std::printf("batch %lld, max_length %lld (%s), seed %llu, epoch 0\n\n",
              static_cast<long long>(batch_size), static_cast<long long>(max_length),
              vm["max-length"].as<int64_t>() > 0 ? "given" : "p99",
              static_cast<unsigned long long>(seed));

  SamplerOptions count;
  count.batch_size = batch_size;
  count.seed = seed;
  count.max_length = max_length;
  SamplerOptions budget = count;
  budget.batch_size = 0;
  budget.max_tokens = batch_size * max_length;

  SamplerOptions wide = count;
  wide.mega_batch_mult = vm["wide-mega-batch-mult"].as<int64_t>();

  RandomBatchSampler random(lengths, count);
  LengthBucketedSampler bucketed(lengths, count);
  LengthBucketedSampler bucketed_wide(lengths, wide);
  LengthBucketedSampler bucketed_budget(lengths, budget);
  random.set_epoch(0);
  bucketed.set_epoch(0);
  bucketed_wide.set_epoch(0);
  bucketed_budget.set_epoch(0);

  std::vector<Row> rows = {
      measure("fixed padding", random, true, max_length),
      measure("dynamic, random batches", random, false, max_length),
      measure("length bucketed", bucketed, false, max_length),
      measure("bucketed, mega_batch_mult=" + std::to_string(wide.mega_batch_mult), bucketed_wide,
              false, max_length),
      measure("bucketed, max_tokens=" + std::to_string(budget.max_tokens), bucketed_budget, false,
              max_length),
  };
  for (Row& r : rows) {
    r.saving_vs_fixed_pct = 100.0 * (1.0 - static_cast<double>(r.tokens_processed) /
                                               static_cast<double>(rows[0].tokens_processed));
  }

  // saved: tokens processed less than with fixed padding.
  std::printf("%-32s %8s %14s %12s %9s %12s\n", "strategy", "batches", "tokens/epoch",
              "real tokens", "padding", "saved");
  for (const Row& r : rows) {
    std::printf("%-32s %8lld %14lld %12lld %8.1f%% %11.1f%%\n", r.strategy.c_str(),
                static_cast<long long>(r.batches), static_cast<long long>(r.tokens_processed),
                static_cast<long long>(r.real_tokens), 100 * r.padding_fraction,
                r.saving_vs_fixed_pct);
  }

  // Loader throughput: full collation into tensors, interleaved runs, medians.
  struct Speed {
    int workers;
    std::vector<double> batches_per_s, tokens_per_s;
  };
  std::vector<Speed> speeds = {{0, {}, {}}, {workers, {}, {}}};
  Collator collator({.pad_to_multiple = 8, .max_length = max_length});
  for (int e = 0; e < epochs; ++e) {
    for (Speed& sp : speeds) {
      LengthBucketedSampler s(lengths, count);
      Loader loader(ds, s, collator, {.num_workers = sp.workers, .prefetch_batches = 16});
      const auto t0 = std::chrono::steady_clock::now();
      loader.set_epoch(e);
      int64_t n = 0, tokens = 0;
      while (auto b = loader.next()) {
        ++n;
        tokens += b->num_padded_tokens;
        // A stand-in for the training step (busy, like a CPU step), to show the overlap.
        const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(step_us);
        while (step_us > 0 && std::chrono::steady_clock::now() < until) {
        }
      }
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      sp.batches_per_s.push_back(static_cast<double>(n) / secs);
      sp.tokens_per_s.push_back(static_cast<double>(tokens) / secs);
    }
  }
  std::printf("\n%-32s %14s %16s   (median of %d epochs, plan + collate into tensors)\n", "loader",
              "batches/s", "tokens/s", epochs);
  for (const Speed& sp : speeds) {
    std::printf("%-32s %14.0f %16.0f\n", (std::to_string(sp.workers) + " worker thread(s)").c_str(),
                upper_median(sp.batches_per_s), upper_median(sp.tokens_per_s));
  }

  if (vm.count("json")) {
    const std::string path = vm["json"].as<std::string>();
    std::ofstream out(path);
    ZT_CHECK(out, "cannot write --json file ", path);
    for (const Row& r : rows) {
      out << "{\"bench\":\"batching\",\"corpus\":\"" << json_escape(shard) << "\",\"strategy\":\""
          << json_escape(r.strategy) << "\",\"batch_size\":" << batch_size
          << ",\"max_length_tokens\":" << max_length << ",\"batches\":" << r.batches
          << ",\"tokens_per_epoch\":" << r.tokens_processed
          << ",\"real_tokens_per_epoch\":" << r.real_tokens
          << ",\"padding_fraction\":" << r.padding_fraction
          << ",\"saving_vs_fixed_pct\":" << r.saving_vs_fixed_pct << "}\n";
    }
    for (const Speed& sp : speeds) {
      out << "{\"bench\":\"batching\",\"corpus\":\"" << json_escape(shard)
          << "\",\"strategy\":\"loader\",\"workers\":" << sp.workers
          << ",\"batches_per_s\":" << upper_median(sp.batches_per_s)
          << ",\"tokens_per_s\":" << upper_median(sp.tokens_per_s) << ",\"epochs\":" << epochs
          << ",\"step_us\":" << step_us << "}\n";
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return zt::run_main("zt_bench_batching", [&] {
    po::options_description desc("zt_bench_batching: smart batching on a token shard");
    desc.add_options()("help,h", "this help")("shard", po::value<std::string>()->required(),
                                              "token shard written by zt-pretokenize")(
        "batch-size", po::value<int64_t>()->default_value(24), "samples per batch")(
        "max-length", po::value<int64_t>()->default_value(0), "fixed length (0 = the p99)")(
        "workers", po::value<int>()->default_value(2), "loader threads for the speed test")(
        "epochs", po::value<int>()->default_value(3), "epochs timed per loader setting")(
        "wide-mega-batch-mult", po::value<int64_t>()->default_value(400),
        "mega_batch_mult of the extra bucketed row (50 is the default row)")(
        "seed", po::value<uint64_t>()->default_value(0), "sampler seed")(
        "step-us", po::value<int64_t>()->default_value(0),
        "busy-wait this long per batch in the consumer, standing in for the training step")(
        "json", po::value<std::string>(), "also write the rows as JSON lines here");
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, desc), vm);
    if (vm.count("help")) {
      std::cout << desc << "\n";
      return 0;
    }
    po::notify(vm);
    return run(vm);
  });
}
