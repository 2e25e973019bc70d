#include "weights/torch_save_reader.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include <torch/csrc/jit/serialization/pickle.h>

#include "base/error.h"

namespace zt {

c10::IValue read_torch_file(const std::string& path) {
  ZT_CHECK(std::filesystem::is_regular_file(path), "torch file ", path, " does not exist");
  std::ifstream in(path, std::ios::binary);
  ZT_CHECK(in.good(), "cannot open torch file ", path);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // torch.save's zip archives start with a local file header; the legacy format (a bare pickle
  // followed by raw storages) is not something LibTorch reads.
  ZT_CHECK(bytes.size() >= 4 && bytes[0] == 'P' && bytes[1] == 'K', "torch file ", path,
           " is not a torch.save zip archive (the legacy format of torch.save("
           "_use_new_zipfile_serialization=False) or not a torch file at all)");
  c10::IValue v;
  try {
    v = torch::pickle_load(bytes);
  } catch (const std::exception& e) {
    // LibTorch's messages carry a backtrace after the first line; the user needs the first line.
    ZT_THROW("LibTorch's unpickler cannot read ", path, ": ", first_line(e.what()));
  }
  ZT_CHECK(!v.isNone(), "LibTorch's unpickler cannot read ", path,
           ": it returned None (an OrderedDict nested in another container, which LibTorch does "
           "not rebuild)");
  return v;
}

std::map<std::string, at::Tensor> read_torch_state_dict(const std::string& path) {
  const c10::IValue v = read_torch_file(path);
  ZT_CHECK(v.isGenericDict(), "torch file ", path, " holds a ", v.tagKind(),
           ", not a dict of parameter name -> tensor");
  std::map<std::string, at::Tensor> out;
  for (const auto& kv : v.toGenericDict()) {
    ZT_CHECK(kv.key().isString(), "torch file ", path, ": a key is a ", kv.key().tagKind(),
             ", not a parameter name");
    const std::string name = kv.key().toStringRef();
    ZT_CHECK(kv.value().isTensor(), "torch file ", path, ": entry ", name, " is a ",
             kv.value().tagKind(), ", not a tensor");
    out[name] = kv.value().toTensor();
  }
  return out;
}

}  // namespace zt
