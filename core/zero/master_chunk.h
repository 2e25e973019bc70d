#pragma once
// MasterChunk: the unit in which the master and the optimizer state are visited, whatever
// store holds them (core/zero/master_store.h).

#include <cstddef>
#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

namespace zt::zero {

// One piece of one slot's stepped range, valid inside the visiting callback only.
struct MasterChunk {
  size_t slot = 0;
  int64_t begin = 0;  // element offset of the chunk in the slot's stepped range
  int64_t numel = 0;
  at::Tensor master;  // (numel,) in the master dtype (EngineOptions::master_dtype)
  // The state the store holds, in MasterStore::state_names() order, each (numel,) in the state
  // dtype, laid out like master; empty when the optimizer holds its own state.
  std::vector<at::Tensor> states;
  // The chunk's reduced gradient where the store brought it with the chunk (gradients spilled to
  // the NVMe chunk files, core/zero/grad_spill.h), in the accumulation dtype; else undefined.
  at::Tensor grad;
};

// Elements of a 16-bit master the step widens to fp32 at a time (core/zero/sharded_step.cpp:
// four fp32 temporaries of this size: master, both moments, gradient).
inline constexpr int64_t kWidenPiece = int64_t{1} << 20;

}  // namespace zt::zero
