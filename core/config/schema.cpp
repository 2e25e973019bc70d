#include "core/config/schema.h"

namespace zt {

using config_schema::name_of;

const char* to_string(OffloadDevice v) {
  return name_of(v, config_schema::kOffloadDeviceNames);
}
const char* to_string(DType v) {
  return name_of(v, config_schema::kDTypeNames);
}
const char* to_string(OptimizerType v) {
  return name_of(v, config_schema::kOptimizerNames);
}
const char* to_string(SchedulerType v) {
  return name_of(v, config_schema::kSchedulerNames);
}
const char* to_string(WarmupType v) {
  return name_of(v, config_schema::kWarmupTypeNames);
}
const char* to_string(CommBackend v) {
  return name_of(v, config_schema::kCommBackendNames);
}
const char* to_string(TagValidation v) {
  return name_of(v, config_schema::kTagValidationNames);
}
const char* to_string(LoadFallback v) {
  return name_of(v, config_schema::kLoadFallbackNames);
}

}  // namespace zt
