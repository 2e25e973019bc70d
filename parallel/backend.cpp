#include "parallel/backend.h"

#include "base/error.h"

namespace zt::dist {

const char* backend_name(Backend backend) {
  switch (backend) {
    case Backend::kAuto: return "auto";
    case Backend::kMpi: return "mpi";
    case Backend::kGloo: return "gloo";
    case Backend::kNccl: return "nccl";
  }
  return "unknown";
}

Backend parse_backend(const std::string& name) {
  for (Backend b : {Backend::kAuto, Backend::kMpi, Backend::kGloo, Backend::kNccl}) {
    if (name == backend_name(b)) return b;
  }
  ZT_THROW("communication backend must be auto, mpi, gloo or nccl, got '", name, "'");
}

}  // namespace zt::dist
