#include "core/checkpoint/model_export.h"

#include <filesystem>
#include <memory>
#include <numeric>

#include <ATen/ATen.h>

#include "base/error.h"
#include "base/logging.h"
#include "parallel/communicator.h"
#include "parallel/tensor_parallel.h"
#include "parallel/topology.h"
#include "weights/safetensors_writer.h"

namespace zt {

bool save_16bit_model(Engine& engine, const std::string& path) {
  const EngineOptions& o = engine.options();
  if (o.stage == 3 && !o.stage3_gather_16bit_weights_on_model_save) {
    ZT_LOG_WARN("save_16bit_model: did not save ", path,
                ": zero_optimization.stage3_gather_16bit_weights_on_model_save is false at "
                "stage 3; save a checkpoint and run zt-consolidate to get fp32 weights");
    return false;
  }
  // Under tensor (expert) parallelism a split parameter's slices are gathered over the tensor
  // (expert) group and joined along their split dimension, so the file holds the whole model
  // whatever the split.
  dist::Communicator& comm = *engine.topology().all;
  dist::Communicator* tensor = engine.topology().split().get();
  const auto& split = o.tensor_split_params;
  auto split_dim = [&](const std::string& name) -> int64_t {
    auto it = split.find(name);
    return tensor == nullptr || it == split.end() ? -1 : it->second;
  };
  const bool writer = comm.rank() == 0;
  std::unique_ptr<SafetensorsWriter> out;
  std::string error;
  if (writer) {
    // Every rank must take part in the gathers below even when rank 0 cannot write: errors are
    // kept until the end and then shared, so no rank waits forever.
    try {
      const std::filesystem::path parent = std::filesystem::path(path).parent_path();
      if (!parent.empty()) std::filesystem::create_directories(parent);
      std::vector<SafetensorsWriter::Entry> entries;
      for (const auto& [name, p] : engine.named_parameters_by_unit()) {
        std::vector<int64_t> shape = p.sizes().vec();
        if (split_dim(name) >= 0) {
          const auto& slices = engine.tensor_slices().at(name);
          shape[split_dim(name)] = std::accumulate(slices.begin(), slices.end(), int64_t{0});
        }
        auto dealt = engine.dealt_names().find(name);
        if (dealt == engine.dealt_names().end()) {
          entries.push_back({name, p.scalar_type(), shape});
        } else {  // every rank's parameter at this position, under its own name
          for (const std::string& held : dealt->second) {
            entries.push_back({held, p.scalar_type(), shape});
          }
        }
      }
      out = std::make_unique<SafetensorsWriter>(path, std::move(entries));
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  engine.for_each_full_parameter([&](const std::string& name, const at::Tensor& value) {
    at::Tensor whole = value;
    if (split_dim(name) >= 0) {  // every rank of the group visits the same parameter here
      whole = dist::join_slices(value, split_dim(name), engine.tensor_slices().at(name), *tensor);
    }
    auto dealt = engine.dealt_names().find(name);
    std::vector<at::Tensor> held;  // a dealt parameter: every rank's, in rank order
    if (dealt != engine.dealt_names().end()) {
      const std::vector<int64_t> ones(dealt->second.size(), 1);
      held = dist::join_slices(value.unsqueeze(0), 0, ones, *tensor).unbind(0);
    }
    if (!out || !error.empty()) return;
    try {
      if (held.empty()) {
        out->write(name, whole);
      } else {
        for (size_t r = 0; r < held.size(); ++r) out->write(dealt->second[r], held[r]);
      }
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  if (out && error.empty()) {
    try {
      out->commit();
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  out.reset();  // an uncommitted file is removed here
  at::Tensor failed = at::full({1}, error.empty() ? 0 : 1,
                               at::TensorOptions().dtype(at::kInt).device(comm.device()));
  comm.all_reduce(failed, dist::ReduceOp::kMax)->wait();
  ZT_CHECK(failed.item<int>() == 0, "save_16bit_model: could not write ", path,
           error.empty() ? " (rank 0 failed)" : ": " + error);
  ZT_LOG_INFO("save_16bit_model: wrote ", path);
  return true;
}

}  // namespace zt
