#pragma once
// Files that torch.save writes (since PyTorch 1.6 a zip archive: <archive>/data.pkl, a pickle,
// whose tensors are the records <archive>/data/<key>), read with LibTorch's own unpickler
// (torch::pickle_load). It builds nothing but IValues (dicts, lists, tuples, strings, numbers,
// tensors), so no Python code runs on load, and it reads what checkpoints of plain state_dicts
// are made of: pytorch_model.bin, DeepSpeed's universal zero/<param>/{fp32,exp_avg,...}.pt.
//
//   c10::IValue v = zt::read_torch_file("zero/wte.weight/fp32.pt");   // {"param": T, "cat_dim": 0}
//   std::map<std::string, at::Tensor> sd = zt::read_torch_state_dict("pytorch_model.bin");
//
// What LibTorch 2.11's unpickler cannot read, and so neither can we (one zt::Error naming the
// file and quoting the unpickler's first line): any Python class besides the tensor rebuilders
// and OrderedDict (DeepSpeed's LossScaler and ZeroStageEnum in zero/optimizer_state.pt), the
// global torch.Size (the param_shapes of DeepSpeed's *_model_states.pt), and an OrderedDict
// nested in another container, which it reads as None (the `module` of *_model_states.pt):
// a file whose top level comes back None is reported as unreadable rather than returned.
// Tensors come back on the CPU, with their saved dtype, shape and strides.

#include <map>
#include <string>

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

namespace zt {

// The file's top-level value. Throws naming the file when it is missing, not a torch.save zip
// archive (the legacy pre-1.6 format included), or holds what the unpickler cannot read.
c10::IValue read_torch_file(const std::string& path);

// A file whose top level is a dict of parameter name -> tensor (model.state_dict(), and what
// zero_to_fp32.py writes as pytorch_model.bin). Throws naming the file and the key for any
// entry that is not a string key with a tensor value.
std::map<std::string, at::Tensor> read_torch_state_dict(const std::string& path);

}  // namespace zt
