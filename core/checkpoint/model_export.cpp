#include "core/checkpoint/model_export.h"

#include <filesystem>
#include <memory>

#include "base/error.h"
#include "base/logging.h"
#include "parallel/communicator.h"
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
  dist::Communicator& comm = engine.communicator();
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
      for (const auto& [name, p] : engine.named_parameters_by_unit())
        entries.push_back({name, p.scalar_type(), p.sizes().vec()});
      out = std::make_unique<SafetensorsWriter>(path, std::move(entries));
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  engine.for_each_full_parameter([&](const std::string& name, const at::Tensor& value) {
    if (!out || !error.empty()) return;
    try {
      out->write(name, value);
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
