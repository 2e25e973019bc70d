#pragma once
// A whole model's weights by parameter name from what PyTorch-side tools write, such as
// DeepSpeed's zero_to_fp32.py:
//   FILE.safetensors                  safetensors (safetensors_reader.h)
//   FILE.bin / FILE.pt / FILE.pth     torch.save of a state_dict (torch_save_reader.h)
//   DIR                               DIR/model.safetensors, the shards DIR/model.safetensors.
//                                     index.json names, or DIR/pytorch_model.bin
// Values come back as stored (dtype and shape), on the CPU; load_by_name (train/load_by_name.h)
// puts them into a model, or import_deepspeed_weights (core/checkpoint/deepspeed_import.h) into
// a zerotorch checkpoint. The whole model is held in memory once.

#include <map>
#include <string>

#include <ATen/core/Tensor.h>

namespace zt {

// Throws one zt::Error naming the path when it is none of the above or cannot be read.
std::map<std::string, at::Tensor> read_state_dict_file(const std::string& path);

}  // namespace zt
