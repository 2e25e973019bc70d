// DeepSpeed's elastic batch (core/config/elasticity.h), after compute_elastic_config in
// DeepSpeed's deepspeed/elasticity/elasticity.py; the checks of its ElasticityConfig
// (deepspeed/elasticity/config.py) come first, in its order, so the first mistake is the one
// reported.
#include "core/config/elasticity.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <string>

#include "base/error.h"

namespace zt {
namespace {

constexpr double kLatestVersion = 0.2;

// The 38 smallest highly composite numbers: a base batch is scaled by one of these, so the
// result has as many divisors (GPU counts) as a number of its size can have.
constexpr int64_t kHighlyComposite[] = {
    1,      2,      4,      6,      12,     24,     36,     48,    60,    120,
    180,    240,    360,    720,    840,    1260,   1680,   2520,  5040,  7560,
    10080,  15120,  20160,  25200,  27720,  45360,  50400,  55440, 83160, 110880,
    166320, 221760, 277200, 332640, 498960, 554400, 665280, 720720};

std::string list_text(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// Python's a // b (floor), for the one place a negative operand can reach it.
int64_t floor_div(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

// Python's int(a / b): a true (double) division truncated toward zero.
int64_t trunc_div(int64_t a, int64_t b) {
  return static_cast<int64_t>(std::trunc(static_cast<double>(a) / static_cast<double>(b)));
}

int64_t largest_hcn_at_most(int64_t value) {
  int64_t best = 1;
  for (int64_t h : kHighlyComposite) {
    if (h <= value) best = h;
  }
  return best;
}

// Each base times the largest highly composite number that keeps it <= max_batch; a base
// already above max_batch is dropped, one equal to it kept as it is.
std::set<int64_t> candidate_batch_sizes(const std::vector<int64_t>& bases, int64_t max_batch) {
  std::set<int64_t> out;
  for (int64_t base : bases) {
    if (base > max_batch) continue;
    out.insert(base == max_batch ? base : largest_hcn_at_most(max_batch / base) * base);
  }
  return out;
}

// GPU counts g in [min_gpus, max_gpus] such that g divides batch / m for some micro batch m
// that divides batch: every such g runs batch as m * (batch / (m * g)) * g.
std::vector<int64_t> valid_gpu_counts(int64_t batch, const std::vector<int64_t>& micro,
                                      int64_t min_gpus, int64_t max_gpus) {
  std::set<int64_t> counts;
  for (int64_t m : micro) {
    if (batch % m != 0) continue;
    const int64_t per_micro = batch / m;
    for (int64_t i = 1; i * i <= per_micro; ++i) {
      if (per_micro % i != 0) continue;
      for (int64_t d : {i, per_micro / i}) {
        if (d >= min_gpus && d <= max_gpus) counts.insert(d);
      }
    }
  }
  return {counts.begin(), counts.end()};
}

// The candidate with the most valid GPU counts; among equals the larger (prefer_larger) or
// smaller batch. valid stays unset when no candidate beats the starting point (the smallest
// micro batch with no counts), which only happens when none has a valid count.
struct Best {
  int64_t batch = 0;
  std::optional<std::vector<int64_t>> valid;
};

Best best_candidate(const std::set<int64_t>& candidates, const std::vector<int64_t>& micro,
                    int64_t min_gpus, int64_t max_gpus, bool prefer_larger) {
  Best best{*std::min_element(micro.begin(), micro.end()), std::nullopt};
  size_t most = 0;
  for (int64_t batch : candidates) {
    std::vector<int64_t> valid = valid_gpu_counts(batch, micro, min_gpus, max_gpus);
    const bool better = prefer_larger ? batch > best.batch : batch < best.batch;
    if (valid.size() > most || (valid.size() == most && better)) {
      most = valid.size();
      best = {batch, std::move(valid)};
    }
  }
  return best;
}

// Version 0.1 over GPU counts [min_gpus, max_gpus]; 0 for either means 1 and
// max_batch / smallest micro batch. max_name says what max_batch is, for the message.
Best compatible_gpus_v01(const std::vector<int64_t>& micro, int64_t max_batch, int64_t min_gpus,
                         int64_t max_gpus, bool prefer_larger, const char* max_name) {
  const int64_t smallest = *std::min_element(micro.begin(), micro.end());
  if (min_gpus == 0) min_gpus = 1;
  if (max_gpus == 0) max_gpus = floor_div(max_batch, smallest);
  for (int64_t m : micro) {
    ZT_CHECK(m <= max_batch, "elasticity.micro_batch_sizes: each must be <= ", max_name, " (",
             max_batch, "), got ", list_text(micro));
  }
  std::vector<int64_t> bases = micro;
  // The LCM joins the bases unless it is past max_batch (where it would be dropped anyway);
  // stopping there keeps it from overflowing.
  int64_t lcm = 1;
  bool past_max = false;
  for (int64_t m : micro) {
    const int64_t step = m / std::gcd(lcm, m);
    if (lcm > max_batch / step) {
      past_max = true;
      break;
    }
    lcm *= step;
  }
  if (!past_max) bases.push_back(lcm);
  return best_candidate(candidate_batch_sizes(bases, max_batch), micro, min_gpus, max_gpus,
                        prefer_larger);
}

[[noreturn]] void no_valid_count(const ElasticityConfig& c) {
  ZT_THROW("elasticity: no candidate batch size <= max_train_batch_size (", *c.max_train_batch_size,
           ") has a valid GPU count in min_gpus..max_gpus (", c.min_gpus, "..", c.max_gpus,
           ") with prefer_larger_batch false");
}

// Version 0.2: version 0.1 over nodes, each holding num_gpus_per_node / model_parallel_size
// data-parallel ranks; a world size off that grid gets a batch of its own.
ElasticResult compatible_gpus_v02(const ElasticityConfig& c, int world_size) {
  const int64_t npn = c.num_gpus_per_node, mp = c.model_parallel_size;
  ZT_CHECK(npn % mp == 0, "elasticity.num_gpus_per_node: version 0.2 needs it divisible by ",
           "model_parallel_size (", mp, "), got ", npn);
  const int64_t dp_per_node = npn / mp;
  const int64_t max_batch = *c.max_train_batch_size;
  const Best nodes = compatible_gpus_v01(
      c.micro_batch_sizes, trunc_div(max_batch, dp_per_node), trunc_div(c.min_gpus, npn),
      trunc_div(c.max_gpus, npn), c.prefer_larger_batch,
      "max_train_batch_size / (num_gpus_per_node / model_parallel_size)");
  if (!nodes.valid) no_valid_count(c);
  ElasticResult r;
  r.train_batch_size = nodes.batch * dp_per_node;
  for (int64_t n : *nodes.valid) r.valid_gpus.push_back(n * dp_per_node);
  const int64_t dp_world = world_size / mp;
  if (std::find(r.valid_gpus.begin(), r.valid_gpus.end(), dp_world) != r.valid_gpus.end()) {
    return r;
  }
  // Off the grid: for each micro batch m, the largest multiple of m * dp ranks that fits. dp is
  // DeepSpeed's float (world / npn) * (npn / mp), which need not be whole.
  const double dp = (static_cast<double>(world_size) / static_cast<double>(npn)) *
                    static_cast<double>(dp_per_node);
  std::vector<double> batches;
  for (int64_t m : c.micro_batch_sizes) {
    const double min_batch = static_cast<double>(m) * dp;
    batches.push_back(std::floor(static_cast<double>(max_batch) / min_batch) * min_batch);
  }
  const double batch = c.prefer_larger_batch ? *std::max_element(batches.begin(), batches.end())
                                             : *std::min_element(batches.begin(), batches.end());
  r.train_batch_size = static_cast<int64_t>(std::trunc(batch));
  r.valid_gpus = {static_cast<int64_t>(std::trunc(dp))};
  return r;
}

// DeepSpeed's ElasticityConfig checks, in its order.
void check_fields(const ElasticityConfig& c) {
  ZT_CHECK(c.max_train_batch_size.has_value(),
           "elasticity.max_train_batch_size: required when elasticity is enabled");
  ZT_CHECK(!c.micro_batch_sizes.empty(),
           "elasticity.micro_batch_sizes: required when elasticity is enabled (a list of "
           "positive integers)");
  for (int64_t m : c.micro_batch_sizes) {
    ZT_CHECK(m > 0, "elasticity.micro_batch_sizes: must all be positive, got ",
             list_text(c.micro_batch_sizes));
  }
  ZT_CHECK(c.min_gpus >= 1, "elasticity.min_gpus: must be >= 1, got ", c.min_gpus);
  ZT_CHECK(c.max_gpus >= 1, "elasticity.max_gpus: must be >= 1, got ", c.max_gpus);
  ZT_CHECK(c.max_gpus >= c.min_gpus, "elasticity.min_gpus: must be <= max_gpus (", c.max_gpus,
           "), got ", c.min_gpus);
  ZT_CHECK(c.model_parallel_size >= 1, "elasticity.model_parallel_size: must be >= 1, got ",
           c.model_parallel_size);
  ZT_CHECK(c.num_gpus_per_node >= 1, "elasticity.num_gpus_per_node: must be >= 1, got ",
           c.num_gpus_per_node);
  ZT_CHECK(c.min_time >= 0, "elasticity.min_time: must be >= 0, got ", c.min_time);
}

}  // namespace

ElasticResult compute_elastic_config(const ElasticityConfig& c, int world_size) {
  ZT_CHECK(c.enabled, "elasticity.enabled: elasticity is disabled; set enabled: true to compute ",
           "an elastic batch");
  ZT_CHECK(world_size >= 0, "elasticity: world size must be >= 0 (0: none), got ", world_size);
  check_fields(c);
  ZT_CHECK(c.model_parallel_size == 1 || c.version == 0.2,
           "elasticity.model_parallel_size: version ", c.version,
           " does not support model parallelism (model_parallel_size ", c.model_parallel_size,
           "); use version 0.2");
  ZT_CHECK(c.version <= kLatestVersion, "elasticity.version: ", c.version,
           " is newer than the latest elasticity version, ", kLatestVersion);
  ElasticResult r;
  if (c.version == 0.1) {
    const Best best =
        compatible_gpus_v01(c.micro_batch_sizes, *c.max_train_batch_size, c.min_gpus, c.max_gpus,
                            c.prefer_larger_batch, "max_train_batch_size");
    if (!best.valid) no_valid_count(c);
    r.train_batch_size = best.batch;
    r.valid_gpus = *best.valid;
  } else if (c.version == 0.2) {
    ZT_CHECK(world_size > 0, "elasticity.version: 0.2 needs the world size to compute a batch");
    r = compatible_gpus_v02(c, world_size);
  } else {
    ZT_THROW("elasticity.version: no elastic logic for version ", c.version, "; use 0.1 or 0.2");
  }
  if (world_size == 0) return r;
  ZT_CHECK(std::find(r.valid_gpus.begin(), r.valid_gpus.end(), world_size) != r.valid_gpus.end(),
           "elasticity: world size ", world_size, " is not one of the valid GPU counts ",
           list_text(r.valid_gpus));
  // The largest micro batch that divides each rank's share of the batch.
  std::vector<int64_t> micro = c.micro_batch_sizes;
  std::sort(micro.rbegin(), micro.rend());
  const int64_t per_rank = r.train_batch_size / world_size;
  for (int64_t m : micro) {
    if (per_rank % m == 0) {
      r.micro_batch_size = m;
      return r;
    }
  }
  ZT_THROW("elasticity.micro_batch_sizes: none of ", list_text(c.micro_batch_sizes),
           " divides train_batch_size ", r.train_batch_size, " / world size ", world_size);
}

}  // namespace zt
