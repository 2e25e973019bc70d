#pragma once
// The trained model's weights as one safetensors file, in the compute dtype (fp16/bf16, or fp32
// for fp32 training): DeepSpeed's engine.save_16bit_model. Unlike a checkpoint it holds no
// optimizer state and no fp32 master, and it loads anywhere safetensors loads
// (`safetensors.torch.load_file`, Hugging Face `from_pretrained`).
//
//   zt::save_16bit_model(engine, "out/model.safetensors");   // collective: every rank calls it
//
// Stages 0-2 hold full parameters on every rank: rank 0 writes them. At stage 3 the weights are
// sharded; with zero_optimization.stage3_gather_16bit_weights_on_model_save every rank gathers
// one unit at a time while rank 0 streams it to the file (peak memory ~ the largest unit, never
// the whole model); without it nothing is written and a warning points to zt-consolidate, which
// builds fp32 weights from a checkpoint instead (DeepSpeed behaves the same way).

#include <string>

#include "core/engine.h"

namespace zt {

// Returns true when the file was written (on every rank), false when stage 3 without gathering.
bool save_16bit_model(Engine& engine, const std::string& path);

}  // namespace zt
