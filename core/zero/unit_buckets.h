#pragma once
// The buckets cut from the units (core/zero/units.h): the engine's trainable buckets, and at stage
// 3 the frozen ones. A header of the engine's own (the units are what a model's author declares;
// the buckets live behind Engine::Impl).

#include <cstdint>
#include <memory>
#include <vector>

#include "core/zero/bucket.h"
#include "core/zero/units.h"

namespace zt::zero {

class PartitionedInit;

// Cuts every unit's parameters into buckets (filling unit.buckets). `options.persistent` is
// decided per bucket: stage 3 keeps buckets below persistence_threshold elements gathered.
// With `partitioned` (stage 3, the model built through it), a bucket adopts the flat buffer and
// shard built at construction; a parameter partitioned there but laid out differently here is an
// error naming it.
std::vector<std::unique_ptr<Bucket>> make_buckets(UnitPlan& plan, int64_t reduce_bucket_size,
                                                  BucketOptions options,
                                                  int64_t persistence_threshold,
                                                  PartitionedInit* partitioned = nullptr);

// Stage 3: cuts every unit's floating-point frozen parameters into buckets as make_buckets cuts
// trainable ones (one dtype per bucket, filling unit.frozen_buckets), with `options.frozen` set
// and the same persistence rule. Frozen parameters that are not floating point stay whole.
std::vector<std::unique_ptr<Bucket>> make_frozen_buckets(UnitPlan& plan, int64_t reduce_bucket_size,
                                                         BucketOptions options,
                                                         int64_t persistence_threshold);

}  // namespace zt::zero
