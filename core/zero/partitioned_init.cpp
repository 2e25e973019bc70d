#include "core/zero/partitioned_init.h"

#include <algorithm>
#include <map>

#include <ATen/ATen.h>

#include "base/error.h"
#include "base/heap_trim.h"
#include "core/zero/bucket_plan.h"
#include "core/zero/released_storage.h"
#include "core/zero/units.h"
#include "optim/param_groups.h"

namespace zt::zero {

namespace {

const void* key_of(const at::Tensor& t) {
  return t.unsafeGetTensorImpl();
}

// The bit patterns of t's elements summed as unsigned integers, a chunk at a time (the widening
// copy stays within 8 KiB), modulo 2^52 so that a double holds it exactly.
double fingerprint(const at::Tensor& t) {
  static const std::map<int64_t, at::ScalarType> kBits = {
      {1, at::kByte}, {2, at::kShort}, {4, at::kInt}, {8, at::kLong}};
  at::Tensor bits = t.detach().contiguous().reshape({-1}).view(kBits.at(t.element_size()));
  constexpr int64_t kChunk = 1024;  // 8 KiB of int64 at a time
  uint64_t sum = 0;
  for (int64_t i = 0; i < bits.numel(); i += kChunk) {
    at::Tensor part = bits.narrow(0, i, std::min(kChunk, bits.numel() - i));
    sum += static_cast<uint64_t>(part.sum(at::kLong).item<int64_t>());
  }
  return static_cast<double>(sum & ((uint64_t{1} << 52) - 1));
}

const char* kSameSettings =
    "construction and engine must use the same units, reduce_bucket_size, "
    "stage3_param_persistence_threshold and world size";

}  // namespace

PartitionedInit::PartitionedInit(PartitionOptions options) : options_(std::move(options)) {
  ZT_CHECK(options_.world >= 1 && options_.rank >= 0 && options_.rank < options_.world,
           "partitioned construction: rank ", options_.rank, " of world size ", options_.world);
  ZT_CHECK(options_.reduce_bucket_size > 0, "reduce_bucket_size must be positive, got ",
           options_.reduce_bucket_size);
}

bool PartitionedInit::trainable(const std::string& name, const at::Tensor& p) const {
  if (!p.requires_grad()) return false;
  for (const auto& pattern : options_.frozen) {
    if (optim::glob_match(pattern, name)) return false;
  }
  return true;
}

void PartitionedInit::add_unit(const std::string& name, torch::nn::Module& unit) {
  std::vector<std::pair<std::string, at::Tensor>> params;
  for (const auto& p : unit.named_parameters(/*recurse=*/true)) {
    const std::string full = name + "." + p.key();
    auto nested = unit_of_.find(key_of(p.value()));
    if (nested != unit_of_.end() && nested->second.rfind(name + ".", 0) == 0) {
      continue;  // a unit inside this one, added before it, holds it (units.h)
    }
    ZT_CHECK(!added_.count(key_of(p.value())) && !owner_.count(key_of(p.value())),
             "partitioned construction: parameter ", full, " was added twice");
    added_.insert(key_of(p.value()));
    unit_of_[key_of(p.value())] = name;
    if (trainable(full, p.value())) {
      params.emplace_back(full, p.value());
    } else {
      whole_.emplace_back(full, p.value());
    }
  }
  partition(name, std::move(params));
}

void PartitionedInit::add_root(torch::nn::Module& model) {
  ZT_CHECK(!root_added_, "partitioned construction: add_root called twice");
  root_added_ = true;
  std::vector<std::pair<std::string, at::Tensor>> params;
  for (const auto& p : model.named_parameters(/*recurse=*/true)) {
    if (added_.count(key_of(p.value()))) continue;
    if (trainable(p.key(), p.value())) {
      params.emplace_back(p.key(), p.value());
    } else {
      whole_.emplace_back(p.key(), p.value());
    }
  }
  for (const auto& p : params) added_.insert(key_of(p.second));
  for (const auto& p : whole_) added_.insert(key_of(p.second));
  partition("", std::move(params));
}

void PartitionedInit::partition(const std::string& unit,
                                std::vector<std::pair<std::string, at::Tensor>> params) {
  int64_t bytes = 0;
  for (const auto& p : params) bytes += p.second.numel() * p.second.element_size();
  largest_unit_bytes_ = std::max(largest_unit_bytes_, bytes);
  if (params.empty()) return;
  at::NoGradGuard no_grad;
  for (auto& layout : lay_out_unit(params, options_.reduce_bucket_size, options_.world)) {
    const at::Tensor& first = layout.entries().front().param;
    for (const auto& e : layout.entries()) {
      ZT_CHECK(e.param.scalar_type() == first.scalar_type() && e.param.device() == first.device(),
               "parameters of one flat buffer must share dtype and device: ", e.name, " is ",
               e.param.scalar_type(), " on ", e.param.device(), ", ", layout.entries().front().name,
               " is ", first.scalar_type(), " on ", first.device());
    }
    at::TensorOptions o = first.options().requires_grad(false);
    if (options_.device) o = o.device(*options_.device);
    if (options_.dtype && first.is_floating_point()) o = o.dtype(*options_.dtype);
    PartitionedBuffer b{
        .layout = layout,
        .persistent = stays_gathered(3, layout.numel(), options_.persistence_threshold),
        .unit = unit};
    for (const auto& e : layout.entries()) b.fingerprint += fingerprint(e.param);
    if (b.persistent) {  // stays gathered in the engine: kept whole
      b.flat = at::empty({layout.padded_numel()}, o);
      layout.bind_parameters(b.flat);
    } else {
      // This rank's range of the flat buffer, copied parameter by parameter (padding stays 0),
      // before any parameter lets go of its own storage.
      const dist::Range own = layout.shard_range(options_.rank);
      b.shard = at::zeros({own.size()}, o);
      for (const auto& e : layout.entries()) {
        const int64_t lo = std::max(e.range.begin, own.begin);
        const int64_t hi = std::min(e.range.end, own.end);
        if (lo >= hi) continue;
        b.shard.narrow(0, lo - own.begin, hi - lo)
            .copy_(e.param.detach().reshape({-1}).narrow(0, lo - e.range.begin, hi - lo));
      }
      b.flat = empty_released(layout.padded_numel(), o);
      view_released(layout, b.flat);  // frees each parameter's own storage
    }
    const at::Tensor& held = b.persistent ? b.flat : b.shard;
    resident_bytes_ += held.numel() * static_cast<int64_t>(held.element_size());
    for (const auto& e : layout.entries()) owner_[key_of(e.param)] = buffers_.size();
    buffers_.push_back(std::move(b));
  }
  // The unit's own parameter storage is free now; in glibc's heap it would stay resident between
  // the shards (base/heap_trim.h).
  trim_heap();
}

void PartitionedInit::load(ShardWeightSource& source) {
  at::NoGradGuard no_grad;
  for (PartitionedBuffer& b : buffers_) {
    ZT_CHECK(!b.adopted, "partitioned construction: load after the engine adopted the buffer of ",
             b.layout.entries().front().name, "; load before creating the engine");
    // A persistent buffer is held whole (flat), any other as this rank's slice (shard).
    const dist::Range own = b.persistent ? dist::Range{0, b.layout.padded_numel()}
                                         : b.layout.shard_range(options_.rank);
    const at::Tensor& held = b.persistent ? b.flat : b.shard;
    for (const auto& e : b.layout.entries()) {
      const dist::Range r = dist::intersect(e.range, own);
      source.fill(e.name, e.param.sizes(), r.empty() ? 0 : r.begin - e.range.begin,
                  held.narrow(0, r.empty() ? 0 : r.begin - own.begin, r.size()));
    }
  }
  for (const auto& [name, p] : whole_) {
    at::Tensor flat = p.detach().reshape({-1});  // a view for a contiguous parameter
    source.fill(name, p.sizes(), 0, flat);
    if (!flat.is_alias_of(p)) p.detach().copy_(flat.view(p.sizes()));
  }
}

PartitionedBuffer* PartitionedInit::adopt(const dist::FlatLayout& layout, bool persistent) {
  const auto& entries = layout.entries();
  auto it = owner_.find(key_of(entries.front().param));
  if (it == owner_.end()) {
    for (const auto& e : entries) {
      ZT_CHECK(!owner_.count(key_of(e.param)), "parameter ", e.name,
               " was partitioned at construction into another flat buffer than the engine's: ",
               kSameSettings);
    }
    return nullptr;
  }
  PartitionedBuffer& b = buffers_[it->second];
  const auto& built = b.layout.entries();
  for (size_t i = 0; i < std::max(built.size(), entries.size()); ++i) {
    const std::string& name = i < entries.size() ? entries[i].name : built[i].name;
    ZT_CHECK(i < built.size() && i < entries.size() &&
                 key_of(built[i].param) == key_of(entries[i].param),
             "parameter ", name, " was partitioned at construction into another flat buffer than ",
             "the engine's: ", kSameSettings);
  }
  ZT_CHECK(b.layout.padded_numel() == layout.padded_numel() && b.persistent == persistent,
           "flat buffer of ", entries.front().name, " was partitioned at construction for ",
           b.layout.padded_numel(), " padded elements (persistent: ", b.persistent,
           "), the engine lays out ", layout.padded_numel(), " (persistent: ", persistent,
           "): ", kSameSettings);
  ZT_INTERNAL_ASSERT(!b.adopted, "flat buffer of ", entries.front().name, " adopted twice");
  b.adopted = true;
  return &b;
}

void PartitionedInit::check_all_adopted() const {
  for (const auto& b : buffers_) {
    ZT_CHECK(b.adopted, "parameter ", b.layout.entries().front().name,
             " was partitioned at construction (unit '", b.unit.empty() ? "root" : b.unit,
             "') but the engine has no flat buffer for it: ", kSameSettings);
  }
}

void PartitionedInit::check_same_on_every_rank(dist::Communicator& comm) const {
  if (buffers_.empty()) return;
  // [f..., -f...] under max: the maximum and (negated) the minimum of every fingerprint.
  const int64_t n = static_cast<int64_t>(buffers_.size());
  at::Tensor f = at::empty({2 * n}, at::TensorOptions().dtype(at::kDouble));
  for (int64_t i = 0; i < n; ++i) {
    f[i] = buffers_[i].fingerprint;
    f[n + i] = -buffers_[i].fingerprint;
  }
  // On the backend's device: the model may be built on the host and trained on a GPU.
  at::Tensor on_device = f.to(comm.device());
  comm.all_reduce(on_device, dist::ReduceOp::kMax)->wait();
  f = on_device.cpu();
  for (int64_t i = 0; i < n; ++i) {
    const PartitionedBuffer& b = buffers_[i];
    ZT_CHECK(f[i].item<double>() == -f[n + i].item<double>(),
             "partitioned construction: ", b.layout.entries().front().name, " (unit '",
             b.unit.empty() ? "root" : b.unit,
             "') was built with different values on different ranks; every rank must build the "
             "model with the same seed and the same code");
  }
}

}  // namespace zt::zero
