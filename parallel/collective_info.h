#pragma once
// What one collective call was, for timeouts and desync reports: every collective a communicator
// issues gets the next sequence number (1, 2, ...), identical on every rank because every rank
// issues collectives in the same order (communicator.h contract).

#include <cstdint>
#include <string>

#include <ATen/core/Tensor.h>

namespace zt::dist {

struct CollectiveInfo {
  uint64_t seq = 0;
  std::string kind;    // "all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast",
                       // "barrier"
  std::string detail;  // "sum, 4096 x Float" ; empty for barrier

  // "all_reduce #12 (sum, 4096 x Float)"
  std::string describe() const;
};

// "4096 x Float"
std::string describe_tensor(const at::Tensor& t);

// all_to_all's shape contract (communicator.h), checked the same way by every backend: same
// dtype, same size, a multiple of `size`, no overlap. Names the backend.
void check_all_to_all(const at::Tensor& input, const at::Tensor& output, int size,
                      const char* backend);

}  // namespace zt::dist
