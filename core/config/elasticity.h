#pragma once
// elasticity: DeepSpeed's elastic batch. Given the largest acceptable global batch and the micro
// batch sizes a rank may run, it picks one global batch that as many GPU counts as possible can
// split evenly (micro * accumulation * GPUs), so a job can be rescheduled on any of those counts
// and train the same batch. Mirrors compute_elastic_config in DeepSpeed's
// deepspeed/elasticity/elasticity.py (with its config.py and constants.py), as of the last
// version before DeepSpeed 0.19 removed the module. That version:
//  - never offers a candidate above max_train_batch_size (a base larger than it, such as the
//    micro batches' LCM, is dropped; earlier versions kept it unscaled);
//  - picks the micro batch for a given world size as the largest of micro_batch_sizes that
//    divides train_batch_size / world_size, for version 0.1 and 0.2 alike (with a world size,
//    return_microbatch=True returns the same; without one, version 0.1 would read WORLD_SIZE).
//
// The two versions:
//   0.1  candidates are each micro batch and their LCM, each scaled by the largest highly
//        composite number that keeps it <= max_train_batch_size; the winner has the most valid
//        GPU counts in [min_gpus, max_gpus] (a count is valid when it divides
//        candidate / micro for some micro batch), ties going to the larger candidate
//        (prefer_larger_batch) or the smaller one.
//   0.2  (the default) the same at node granularity: with d = num_gpus_per_node /
//        model_parallel_size data-parallel ranks per node, 0.1 runs on max_train_batch_size / d
//        and min_gpus, max_gpus / num_gpus_per_node (nodes), and the result is scaled by d. A
//        world size off that grid gets a batch of its own: for each micro batch m the largest
//        multiple of m * dp_world that fits, the largest (or smallest) of those.
// Arithmetic follows DeepSpeed's, including its float divisions and truncations in 0.2.
//
// Where zerotorch differs: DeepSpeed's 0.2 reads WORLD_SIZE from the environment when no world
// size is given; compute_elastic_config here takes it as an argument only. When no candidate has
// a valid GPU count and prefer_larger_batch is false, DeepSpeed's list of valid counts is None
// (version 0.1 without a world size returns it, every other call fails on it with a TypeError);
// here that is always an error saying so. `version` must be a number ("0.2" as a string is
// rejected by the config reader, where DeepSpeed calls float() on it).
#include <cstdint>
#include <optional>
#include <vector>

namespace zt {

// The config's `elasticity` block, DeepSpeed's keys and defaults. Only read when enabled.
struct ElasticityConfig {
  bool enabled = false;
  std::optional<int64_t> max_train_batch_size;  // required when enabled
  std::vector<int64_t> micro_batch_sizes;       // required when enabled, each >= 1
  int64_t min_gpus = 1;
  int64_t max_gpus = 10000;
  // Minutes a scheduler should let the job run before rescaling it: checked (>= 0), never used,
  // as in DeepSpeed.
  double min_time = 0.0;
  double version = 0.2;  // 0.1 or 0.2
  bool prefer_larger_batch = true;
  // DeepSpeed refuses batch keys beside an enabled block unless this is true; then they are
  // replaced by the elastic values.
  bool ignore_non_elastic_batch_info = false;
  int64_t num_gpus_per_node = 1;    // version 0.2
  int64_t model_parallel_size = 1;  // version 0.2; must divide num_gpus_per_node
};

struct ElasticResult {
  int64_t train_batch_size = 0;
  std::vector<int64_t> valid_gpus;  // ascending; with version 0.2, data-parallel world sizes
  // With a world size: the largest micro batch size dividing train_batch_size / world_size.
  std::optional<int64_t> micro_batch_size;
};

// DeepSpeed's compute_elastic_config(config, world_size=world_size). world_size 0 means none
// given: version 0.1 then returns no micro batch, version 0.2 (which needs one) throws. With a
// world size, one that is not in valid_gpus throws. Every error is a zt::Error whose message
// starts with the `elasticity` key it is about.
ElasticResult compute_elastic_config(const ElasticityConfig& config, int world_size);

}  // namespace zt
