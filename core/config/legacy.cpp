// DeepSpeed's older config forms that today's DeepSpeed still reads, rewritten in the YAML tree
// before the reader sees it, each with one warning naming the old form:
//   "zero_optimization": true / false   -> {"stage": 1} / {"stage": 0}
//   (read_zero_config_deprecated;
//                                          "allgather_size" at the top level feeds stage 1's
//                                          allgather_bucket_size)
//   zero_optimization.cpu_offload: true       -> offload_optimizer: {device: cpu}
//   zero_optimization.cpu_offload_param: true -> offload_param: {device: cpu}
//   zero_optimization.cpu_offload_use_pin_memory -> dropped (DeepSpeed sets nothing from it)
// A false cpu_offload / cpu_offload_param sets nothing, as in DeepSpeed. When the new block is
// given as well, the old key is dropped with its warning (DeepSpeed's deprecated-field rule
// keeps the new one).
#include <string>

#include "core/config/passes.h"
#include "core/config/reader.h"

namespace zt::config_detail {
namespace {

bool is_bool(const YAML::Node& n, bool& value) {
  if (!n.IsScalar() || n.Tag() == "!") return false;
  const std::string& s = n.Scalar();
  if (s == "true" || s == "True") {
    value = true;
    return true;
  }
  if (s == "false" || s == "False") {
    value = false;
    return true;
  }
  return false;
}

void offload_flag(YAML::Node& zero, const char* old_key, const char* new_key, ReadState& st) {
  YAML::Node old = zero[old_key];
  if (!old.IsDefined()) return;
  const std::string path = std::string("zero_optimization.") + old_key;
  bool on = false;
  if (!is_bool(old, on)) return;  // not a boolean: the reader reports it as an unknown key
  const bool has_new = zero[new_key].IsDefined() && !zero[new_key].IsNull();
  zero.remove(old_key);
  if (on && !has_new) {
    YAML::Node block(YAML::NodeType::Map);
    block["device"] = "cpu";
    zero[new_key] = block;
    st.warnings.push_back(path + ": deprecated; read as zero_optimization." + new_key +
                          " {device: cpu}");
  } else {
    st.warnings.push_back(
        path + ": deprecated" +
        std::string(on ? "; zero_optimization." + std::string(new_key) + " is given and wins"
                       : " and false; nothing to do"));
  }
}

}  // namespace

void apply_legacy_forms(YAML::Node& root, ReadState& st) {
  if (!root.IsMap()) return;
  YAML::Node zero = root["zero_optimization"];
  bool on = false;
  if (zero.IsDefined() && is_bool(zero, on)) {
    YAML::Node block(YAML::NodeType::Map);
    block["stage"] = on ? 1 : 0;
    std::string extra;
    if (on && root["allgather_size"].IsDefined()) {
      block["allgather_bucket_size"] = root["allgather_size"];
      root.remove("allgather_size");
      extra = " and allgather_size as its allgather_bucket_size";
    }
    root["zero_optimization"] = block;
    st.warnings.push_back(std::string("zero_optimization: the boolean form is deprecated; ") +
                          (on ? "true" : "false") + " is read as {\"stage\": " + (on ? "1" : "0") +
                          "}" + extra);
    return;
  }
  if (!zero.IsDefined() || !zero.IsMap()) return;
  offload_flag(zero, "cpu_offload", "offload_optimizer", st);
  offload_flag(zero, "cpu_offload_param", "offload_param", st);
  if (zero["cpu_offload_use_pin_memory"].IsDefined()) {
    zero.remove("cpu_offload_use_pin_memory");
    st.warnings.push_back(
        "zero_optimization.cpu_offload_use_pin_memory: deprecated and ignored (DeepSpeed sets "
        "nothing from it); use offload_optimizer.pin_memory / offload_param.pin_memory");
  }
}

}  // namespace zt::config_detail
