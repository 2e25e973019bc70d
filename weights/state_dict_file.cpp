#include "weights/state_dict_file.h"

#include <filesystem>

#include "base/error.h"
#include "weights/safetensors_reader.h"
#include "weights/safetensors_set.h"
#include "weights/torch_save_reader.h"

namespace zt {
namespace fs = std::filesystem;
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::map<std::string, at::Tensor> read_safetensors(const SafetensorsReader& r) {
  std::map<std::string, at::Tensor> out;
  for (const auto& e : r.entries()) out[e.name] = r.read(e.name);
  return out;
}

}  // namespace

std::map<std::string, at::Tensor> read_state_dict_file(const std::string& path) {
  ZT_CHECK(fs::exists(path), "weights ", path, " do not exist");
  if (fs::is_directory(path)) {
    if (SafetensorsSet::present(path)) {
      std::map<std::string, at::Tensor> out;
      SafetensorsSet set(path);
      for (const auto& f : set.files()) out.merge(read_safetensors(*f));
      return out;
    }
    const fs::path bin = fs::path(path) / "pytorch_model.bin";
    if (fs::exists(bin)) return read_torch_state_dict(bin.string());
    ZT_CHECK(!fs::exists(fs::path(path) / "pytorch_model.bin.index.json"), "weights ", path,
             ": a sharded pytorch_model.bin (index.json) is not read; write one file, or "
             "safetensors (zero_to_fp32.py --safe_serialization)");
    ZT_THROW("weights directory ", path,
             " holds no model.safetensors, model.safetensors.index.json or pytorch_model.bin");
  }
  if (ends_with(path, ".safetensors")) return read_safetensors(SafetensorsReader(path));
  return read_torch_state_dict(path);
}

}  // namespace zt
