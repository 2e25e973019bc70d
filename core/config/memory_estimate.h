#pragma once
// Model-state bytes per rank for a parameter count, before anything is built: docs/DESIGN.md's
// table (stage × precision × optimizer) split by where the bytes live, for every optimizer
// offload choice (DeepSpeed's estimate_zero3_model_states_mem_needs, for every stage and
// offload). zt-config validate --params N prints it.
//
//   parameters  P Ψ (stages 0-2) or P Ψ / N (stage 3)       P = 2 in fp16/bf16, 4 in fp32
//   gradients   A Ψ (stages 0-1) or A Ψ / N (stages 2-3)    A = grad_accum_dtype bytes (4; 2
//                                                           with bf16 masters)
//   optimizer   (M + S) Ψ (stage 0) or (M + S) Ψ / N        M = 4 when the fp32 master is separate
//                                                           (16-bit compute or offload), 2 for a
//                                                           bf16 master that is (offload), S = the
//                                                           optimizer's state (Adam 8; 4 with
//                                                           bf16.bf16_optimizer_states)
// The optimizer part sits on the device without offload, in host memory with device cpu, and on
// NVMe with device nvme, where host memory holds buffer_count chunk buffers instead. At stage 3
// the parameter shards likewise (offload_param): on the device, in host memory (cpu), or on NVMe
// past the first max_in_cpu elements, with offload_param.buffer_count buffers of at most
// buffer_size elements in host memory (nvme; the master is then always separate). On a
// CPU-only machine the device is host memory too, except that a CPU model keeps its gradient
// slices in the NVMe optimizer files at stages 2-3 (core/zero/grad_spill.h), which this
// estimate, made for any device, leaves on it; the memory plan (zt-plan) counts them. Padding
// (fewer than N elements per flat buffer) and stage 3's gathered units in flight come on top.

#include <cstdint>
#include <string>
#include <vector>

#include "core/config/config.h"

namespace zt {

struct MemoryEstimate {
  OffloadDevice param_offload = OffloadDevice::kNone;  // stage 3 only
  OffloadDevice optimizer_offload = OffloadDevice::kNone;
  int64_t device_bytes = 0;  // gradients, and parameters and optimizer part without offload
  int64_t host_bytes = 0;    // offloaded parts (cpu) or NVMe swap buffers (nvme)
  int64_t nvme_bytes = 0;    // parts offloaded to nvme
};

// Bytes of optimizer state per stepped element for the config's optimizer (optim/
// shard_optimizer.h: what each one keeps; Adam's two fp32 moments without an optimizer block).
int64_t optimizer_state_bytes_per_element(const Config& config);

// What the config keeps per stepped element, in bytes: the gradient (data_types.grad_accum_dtype;
// bf16 with DeepSpeed's bf16 masters unless that key is written), a separate master (fp32, or
// bf16 with bf16.bf16_master_weights_and_grads at stages 1-3) and the optimizer state (halved by
// bf16.bf16_optimizer_states). The estimate below and the plan (core/plan/memory_plan.h) both
// count with these.
struct ElementBytes {
  bool bf16_master = false;
  int64_t grad = 4, master = 4, state = 8;
};
ElementBytes element_bytes(const Config& config);
// 4 for fp32, 2 for fp16 and bf16.
int64_t dtype_bytes(DType d);

// One estimate per optimizer offload choice (none, cpu, nvme), and at stage 3 per parameter
// offload choice too (parameter-major: param none x {none, cpu, nvme}, param cpu x ..., param
// nvme x ...), for `params` trainable elements with the config's stage, precision, gradient
// dtype, optimizer, sub_group_size, buffer counts and sizes, and offload_param.max_in_cpu.
std::vector<MemoryEstimate> estimate_model_states(const Config& config, int64_t params,
                                                  int world_size);

// The estimates as lines of text, the config's own choice marked.
std::vector<std::string> memory_estimate_lines(const Config& config, int64_t params,
                                               int world_size);

}  // namespace zt
