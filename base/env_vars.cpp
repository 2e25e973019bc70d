#include "base/env_vars.h"

#include <cstdlib>

#include "base/error.h"

namespace zt::env {

const char* get(const char* name) {
  return std::getenv(name);
}

std::string get_or(const char* name, const std::string& fallback) {
  const char* v = get(name);
  return v != nullptr && *v != '\0' ? std::string(v) : fallback;
}

std::string choice(const char* name, const char* fallback,
                   std::initializer_list<const char*> allowed) {
  const std::string v = get_or(name, fallback);
  std::string list;
  size_t i = 0;
  for (const char* a : allowed) {
    if (v == a) return v;
    list += (i == 0 ? "" : i + 1 == allowed.size() ? " or " : ", ");
    list += a;
    ++i;
  }
  ZT_THROW(name, " must be ", list, ", got '", v, "'");
}

}  // namespace zt::env
