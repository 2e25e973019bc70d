#include "examples/gpt/gpt_plan.h"

#include <algorithm>

#include "base/error.h"
#include "models/gpt/gpt_memory.h"
#include "train/activation_probe.h"

namespace zt::examples {

plan::MemoryPlan GptPlanner::operator()(const Config& c, int world_size, const std::string& backend,
                                        bool checkpointing) {
  const train::ProbeBatch probed = train::probe_batch(c, shape_.max_seq_len);
  const int64_t batch = probed.batch, seq = probed.seq;
  const at::ScalarType dtype = probed.dtype;
  models::GptShape shape = shape_;
  shape.activation_checkpointing = shape.activation_checkpointing || checkpointing;
  const Key key{shape.activation_checkpointing, static_cast<int>(dtype), batch, seq};
  auto it = probes_.find(key);
  if (it == probes_.end()) {
    const train::KeepRandomState keep(device_);
    models::GptProbe probe = models::make_gpt_probe(shape, batch, seq, device_, dtype);
    const plan::UnitActivations block =
        train::probe_activations(*probe.block, probe.block_forward, device_);
    const plan::UnitActivations root =
        train::probe_activations(*probe.root, probe.root_forward, device_);
    it = probes_.emplace(key, std::make_pair(block, root)).first;
  }
  plan::ModelMemory mm = models::gpt_model_memory(shape);
  for (size_t u = 0; u + 1 < mm.units.size(); ++u) mm.units[u].activations = it->second.first;
  mm.units.back().activations = it->second.second;
  mm.activations_source =
      detail::str("one block and the root probed on ", device_.str(), " at ", batch, " x ", seq,
                  " tokens", shape.activation_checkpointing ? ", checkpointed" : "");
  return plan::plan_memory(c, world_size, mm, device_, backend);
}

}  // namespace zt::examples
