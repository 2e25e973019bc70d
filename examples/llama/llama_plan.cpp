#include "examples/llama/llama_plan.h"

#include <algorithm>

#include <ATen/ATen.h>

#include "base/error.h"
#include "train/activation_probe.h"

namespace zt::examples {

LlamaPlanner::LlamaPlanner(models::LlamaShape shape, models::LlamaRankSplit split,
                           c10::Device device)
    : shape_(std::move(shape)),
      model_(models::llama_model_memory(shape_, split)),
      split_(split),
      device_(device) {}

plan::MemoryPlan LlamaPlanner::operator()(const Config& c, int world_size,
                                          const std::string& backend, bool checkpointing) {
  const int64_t sp = split_.sequence;
  const train::ProbeBatch probed = train::probe_batch(c, shape_.max_position_embeddings, sp);
  const int64_t batch = probed.batch, seq = probed.seq;
  const at::ScalarType dtype = probed.dtype;
  models::LlamaShape shape = shape_;
  shape.activation_checkpointing = shape.activation_checkpointing || checkpointing;
  const Key key{shape.activation_checkpointing, static_cast<int>(dtype), batch, seq};
  auto it = probes_.find(key);
  if (it == probes_.end()) {
    const train::KeepRandomState keep(device_);
    // The same weights and inputs for every plan of this shape (the routing, and so a mixture's
    // activations, follow them): zt-plan before launch and the program plan alike.
    at::manual_seed(0);
    models::LlamaProbe probe = models::make_llama_probe(shape, batch, seq, split_, device_, dtype);
    Probed p;
    for (const models::LlamaProbe::Layer& l : probe.layers) {
      p.layers.emplace_back(l.kind, train::probe_activations(*l.module, l.forward, device_));
    }
    p.root = train::probe_activations(*probe.root, probe.root_forward, device_);
    p.mask_bytes = probe.mask_bytes;
    it = probes_.emplace(key, p).first;
  }
  const Probed& p = it->second;
  const auto layer_activations = [&](int64_t i) {
    const models::LlamaProbe::Kind kind{shape.moe.routes(i), models::layer_window(shape, i, seq)};
    for (const auto& [k, act] : p.layers) {
      if (k == kind) return act;
    }
    ZT_THROW("llama plan: no probe of layer ", i, "'s kind");
  };
  plan::ModelMemory mm = model_;
  const std::string layer = "model.layers.";
  bool head_unit = false;
  for (plan::PlannedUnit& u : mm.units) {
    u.activations = {};
    if (u.name.rfind(layer, 0) == 0 && u.name.find('.', layer.size()) == std::string::npos) {
      const int64_t i = std::stoll(u.name.substr(layer.size()));
      u.activations = layer_activations(i);
      // The windows' masks are made before the first layer and kept to its backward, the last.
      if (i == 0) u.activations.saved += p.mask_bytes;
    } else if (u.name == "lm_head") {
      u.activations = p.root;
      head_unit = true;
    }
  }
  if (!head_unit) mm.units.back().activations = p.root;
  mm.activations_source = detail::str(
      "one layer of each kind and the root probed on ", device_.str(), " at ", batch, " x ", seq,
      " tokens", sp > 1 ? detail::str(" (", seq / sp, " on this rank)") : std::string(),
      shape.activation_checkpointing ? ", checkpointed" : "");
  return plan::plan_memory(c, world_size, mm, device_, backend);
}

}  // namespace zt::examples
