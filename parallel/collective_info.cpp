#include "parallel/collective_info.h"

#include "base/error.h"

namespace zt::dist {

std::string CollectiveInfo::describe() const {
  std::string s = detail::str(kind, " #", seq);
  if (!detail.empty()) s += " (" + detail + ")";
  return s;
}

std::string describe_tensor(const at::Tensor& t) {
  return detail::str(t.numel(), " x ", t.scalar_type());
}

}  // namespace zt::dist
