#pragma once
// The steps of a checkpoint save that the synchronous save (core/checkpoint/checkpoint.cpp) and
// the background one (core/checkpoint/async_checkpoint.h) share, so both write the same files in
// the same order and commit them the same way. Not for callers outside core/checkpoint/.

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "core/checkpoint/checkpoint.h"
#include "core/checkpoint/format.h"

namespace zt::checkpoint_detail {

// Where this rank's part of a save goes.
struct SaveTarget {
  std::filesystem::path dir, tag_dir;
  std::string tag;
  int shard_rank = 0, shard_world = 1;  // numbering within the shard group
  bool lead = false;                    // global rank 0: writes metadata and `latest`
  bool writer = false;                  // the first shard group writes shards
  std::filesystem::path shard_path() const;
};

// Collective: checks the tag; rank 0 creates the tag directory and removes its metadata (a tag
// saved again is incomplete until the new metadata lands); barrier.
SaveTarget begin_save(Engine& engine, const std::string& dir, const std::string& tag);

// What metadata.ztm records about the engine now; the shard list is filled at commit.
ckpt::Metadata metadata_now(Engine& engine, const CheckpointOptions& options);

// Frozen parameters (rank 0 saves them so consolidation exports the whole model) and the CPU
// generator's state: what ShardWriter::finish writes after the buffers. Collective over the
// shard group (stage 3 gathers frozen shards: Engine::for_each_frozen_value); only with `keep`
// are the values kept (copies on the CPU), otherwise the result is empty.
std::vector<std::pair<std::string, at::Tensor>> frozen_parameters(Engine& engine, bool keep);
at::Tensor cpu_rng_state();
// The default generator state of `device` (an accelerator: CUDA or the test device), so dropout
// on the device resumes identically; 0 elements for the CPU, whose state cpu_rng_state() holds.
at::Tensor device_rng_state(c10::Device device);
// Restores a state device_rng_state() saved; a 0-element state (a CPU run, or a version 1 file)
// leaves the generator alone.
void restore_device_rng_state(c10::Device device, const at::Tensor& state);

// Bytes of tensor data the shard holds at least; throws naming the file when its directory has
// less free space.
uint64_t shard_bytes_at_least(const std::vector<Engine::ShardState>& states, size_t store_states);
void check_free_space(const std::filesystem::path& dir, const std::filesystem::path& file,
                      uint64_t need);
void fsync_dir(const std::filesystem::path& dir);

// Rank 0, once every shard is durable under its final name: metadata.ztm (with `meta.shards`),
// then `latest`, then keep_last.
void commit_save(const SaveTarget& target, ckpt::Metadata meta, int64_t keep_last);

}  // namespace zt::checkpoint_detail
