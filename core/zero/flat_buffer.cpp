#include "core/zero/flat_buffer.h"

#include <algorithm>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include "base/error.h"

namespace zt::dist {

Range intersect(Range a, Range b) {
  Range r{std::max(a.begin, b.begin), std::min(a.end, b.end)};
  if (r.end < r.begin) r.end = r.begin;
  return r;
}

FlatLayout::FlatLayout(std::vector<std::pair<std::string, at::Tensor>> params, int world_size)
    : world_size_(world_size) {
  ZT_CHECK(world_size >= 1, "flat buffer: world size must be >= 1, got ", world_size);
  int64_t offset = 0;
  for (auto& [name, p] : params) {
    ZT_CHECK(p.defined(), "flat buffer: parameter '", name, "' is undefined");
    int64_t n = p.numel();
    entries_.push_back(FlatEntry{name, p, Range{offset, offset + n}});
    offset += n;
  }
  numel_ = offset;
  int64_t shard = (numel_ + world_size - 1) / world_size;
  padded_numel_ = shard * world_size;
}

Range FlatLayout::shard_range(int rank) const {
  ZT_INTERNAL_ASSERT(rank >= 0 && rank < world_size_, "rank ", rank);
  int64_t s = shard_numel();
  return Range{rank * s, (rank + 1) * s};
}

void FlatLayout::bind_parameters(const at::Tensor& flat) const {
  ZT_INTERNAL_ASSERT(flat.dim() == 1 && flat.numel() == padded_numel_ && flat.is_contiguous(),
                     "flat buffer of ", flat.numel(), " elements for a layout of ", padded_numel_);
  c10::NoGradGuard no_grad;
  if (padded_numel_ > numel_) flat.narrow(0, numel_, padded_numel_ - numel_).zero_();
  for (const auto& e : entries_) {
    at::Tensor view = flat.narrow(0, e.range.begin, e.range.size()).view(e.param.sizes());
    view.copy_(e.param.detach());
    e.param.set_data(view);
  }
}

void FlatLayout::view_parameters(const at::Tensor& flat) const {
  ZT_INTERNAL_ASSERT(flat.dim() == 1 && flat.numel() == padded_numel_ && flat.is_contiguous(),
                     "flat buffer of ", flat.numel(), " elements for a layout of ", padded_numel_);
  c10::NoGradGuard no_grad;
  for (const auto& e : entries_) {
    e.param.set_data(flat.narrow(0, e.range.begin, e.range.size()).view(e.param.sizes()));
  }
}

std::vector<size_t> plan_buckets(const std::vector<at::Tensor>& params, int64_t max_bucket_numel) {
  ZT_CHECK(max_bucket_numel > 0, "reduce_bucket_size must be positive, got ", max_bucket_numel);
  std::vector<size_t> sizes;
  int64_t current = 0;
  size_t count = 0;
  for (const auto& p : params) {
    if (count > 0 && current + p.numel() > max_bucket_numel) {
      sizes.push_back(count);
      current = 0;
      count = 0;
    }
    current += p.numel();
    ++count;
  }
  if (count > 0) sizes.push_back(count);
  return sizes;
}

}  // namespace zt::dist
