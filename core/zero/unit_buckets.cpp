#include "core/zero/unit_buckets.h"

#include <algorithm>

#include "core/zero/bucket_plan.h"
#include "core/zero/partitioned_init.h"

namespace zt::zero {

std::vector<std::unique_ptr<Bucket>> make_buckets(UnitPlan& plan, int64_t reduce_bucket_size,
                                                  BucketOptions options,
                                                  int64_t persistence_threshold,
                                                  PartitionedInit* partitioned) {
  std::vector<std::unique_ptr<Bucket>> buckets;
  for (size_t u = 0; u < plan.units.size(); ++u) {
    Unit& unit = *plan.units[u];
    for (auto& layout : lay_out_unit(unit.params, reduce_bucket_size, options.world)) {
      BucketOptions o = options;
      o.persistent = stays_gathered(options.stage, layout.numel(), persistence_threshold);
      PartitionedBuffer* built = partitioned ? partitioned->adopt(layout, o.persistent) : nullptr;
      if (built != nullptr) {
        buckets.push_back(std::make_unique<Bucket>(std::move(layout), u, o, std::move(built->flat),
                                                   std::move(built->shard)));
      } else {
        buckets.push_back(std::make_unique<Bucket>(std::move(layout), u, o));
      }
      unit.buckets.push_back(buckets.size() - 1);
    }
  }
  if (partitioned) partitioned->check_all_adopted();
  return buckets;
}

std::vector<std::unique_ptr<Bucket>> make_frozen_buckets(UnitPlan& plan, int64_t reduce_bucket_size,
                                                         BucketOptions options,
                                                         int64_t persistence_threshold) {
  std::vector<std::unique_ptr<Bucket>> buckets;
  options.frozen = true;
  for (size_t u = 0; u < plan.units.size(); ++u) {
    Unit& unit = *plan.units[u];
    // One flat buffer holds one dtype: a unit with frozen parameters of several floating dtypes
    // gets buckets for each, in the order the dtypes first appear.
    std::vector<at::ScalarType> dtypes;
    for (const auto& p : unit.frozen) {
      const at::ScalarType t = p.second.scalar_type();
      if (p.second.is_floating_point() &&
          std::find(dtypes.begin(), dtypes.end(), t) == dtypes.end())
        dtypes.push_back(t);
    }
    for (at::ScalarType t : dtypes) {
      std::vector<std::pair<std::string, at::Tensor>> same;
      for (const auto& p : unit.frozen)
        if (p.second.is_floating_point() && p.second.scalar_type() == t) same.push_back(p);
      for (auto& layout : lay_out_unit(same, reduce_bucket_size, options.world)) {
        BucketOptions o = options;
        o.persistent = stays_gathered(options.stage, layout.numel(), persistence_threshold);
        buckets.push_back(std::make_unique<Bucket>(std::move(layout), u, o));
        unit.frozen_buckets.push_back(buckets.size() - 1);
      }
    }
  }
  return buckets;
}

}  // namespace zt::zero
