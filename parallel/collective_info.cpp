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

void check_all_to_all(const at::Tensor& input, const at::Tensor& output, int size,
                      const char* backend) {
  ZT_CHECK(input.scalar_type() == output.scalar_type(), backend, " all_to_all: input is ",
           input.scalar_type(), " but output is ", output.scalar_type());
  ZT_CHECK(input.numel() == output.numel() && input.numel() % size == 0, backend,
           " all_to_all: input (", describe_tensor(input), ") and output (",
           describe_tensor(output), ") must have the same size, a multiple of size() = ", size);
  if (input.numel() == 0) return;
  const char* in = static_cast<const char*>(input.data_ptr());
  const char* out = static_cast<const char*>(output.data_ptr());
  const int64_t bytes = input.numel() * static_cast<int64_t>(input.element_size());
  ZT_CHECK(in + bytes <= out || out + bytes <= in, backend,
           " all_to_all: input and output overlap (it does not run in place)");
}

}  // namespace zt::dist
