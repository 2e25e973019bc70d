#pragma once
// A DeepSpeed universal checkpoint (deepspeed/checkpoint/ds_to_universal.py's output), read
// parameter by parameter, so a caller holds one parameter's values at a time:
//
//   DIR/zero/<param name>/fp32.pt        the fp32 master: {"param": tensor in the parameter's
//                                        shape, "cat_dim": 0, ...} from a ZeRO stage 0-2 run;
//                                        from a stage-3 run the bare tensor, flat (row-major)
//   DIR/zero/<param name>/exp_avg.pt     Adam's first moment, the same layout
//   DIR/zero/<param name>/exp_avg_sq.pt  Adam's second moment, the same layout
//   DIR/zero/<param name>/step.pt        the optimizer's step count, a 0-d tensor (torch's
//                                        AdamW keeps it as float) or a number; absent from a
//                                        stage-3 run's
//   DIR/zero/optimizer_state.pt          param groups and loss scaler: not read (LibTorch's
//                                        unpickler cannot, torch_save_reader.h; the hyper-
//                                        parameters come from the zerotorch config instead)
//   DIR/*model_states.pt                 not read, for the same reason (torch.Size, nested
//                                        OrderedDicts); names and shapes come from zero/ itself,
//                                        or for a stage-3 run's flat values from the caller
//
// Parameter names are DeepSpeed's, i.e. the PyTorch module's named_parameters(). Every .pt is
// read with LibTorch's unpickler (read_torch_file).

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace zt {

class DeepSpeedUniversal {
 public:
  // The state files of a parameter besides step.pt, in the order they are written.
  static constexpr const char* kStates[] = {"fp32", "exp_avg", "exp_avg_sq"};

  // Lists DIR/zero/'s parameter directories; reads nothing else yet. Throws naming DIR when it is
  // not a universal checkpoint.
  explicit DeepSpeedUniversal(const std::string& dir);

  // Whether DIR looks like one: a zero/ folder with at least one <param>/fp32.pt.
  static bool present(const std::string& dir);

  // Parameter names, digits compared as numbers ("blocks.2" before "blocks.10").
  const std::vector<std::string>& names() const { return names_; }
  // The fp32 value of `state` (one of kStates) of parameter `name`, as stored. With `shape`, the
  // value must have it, or be flat with as many elements (a stage-3 run's), and comes back in
  // it. Throws naming the file when it is missing, unreadable, not floating point or misshapen.
  at::Tensor read(const std::string& name, const std::string& state,
                  const std::vector<int64_t>* shape = nullptr) const;
  // The optimizer step saved with parameter `name` (its step.pt); -1 when it has none.
  int64_t step(const std::string& name) const;
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::vector<std::string> names_;
};

}  // namespace zt
