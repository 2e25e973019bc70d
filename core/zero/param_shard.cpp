#include "core/zero/param_shard.h"

#include <ATen/ATen.h>

#include "base/error.h"
#include "core/zero/block_quant.h"
#include "core/zero/nvme_params.h"
#include "core/zero/pinned_host.h"

namespace zt::zero {
namespace {

int64_t shard_nbytes(const at::Tensor& t) {
  return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0;
}

// A copy of `src` in `dtype` where `where` puts a shard: the parameters' device, or host memory
// (page-locked when asked and the parameters are on a GPU, so copies can be asynchronous; exactly
// sized, pinned_host.h).
at::Tensor placed_copy(const at::Tensor& src, const ShardPlacement& where, at::ScalarType dtype) {
  if (where.host && where.pin && where.device.type() != c10::kCPU) {
    return pinned_host_copy(src, dtype, where.device.type());
  }
  at::Tensor out = at::empty(
      {src.numel()},
      at::TensorOptions().dtype(dtype).device(where.host ? c10::Device(c10::kCPU) : where.device));
  out.copy_(src);
  return out;
}

class MemoryShard : public ParamShard {
 public:
  MemoryShard(const ShardPlacement& where, at::Tensor adopted)
      : where_(where), t_(std::move(adopted)) {}
  void keep(const at::Tensor& own) override {
    if (t_.defined()) {
      t_.copy_(own);  // in place: checkpoints and the optimizer hold this tensor
    } else {
      t_ = placed_copy(own, where_, own.scalar_type());
    }
  }
  at::Tensor checkout(bool) override { return t_; }
  void load_into(const at::Tensor& own, bool non_blocking) override { own.copy_(t_, non_blocking); }
  at::Tensor resident() const override { return t_; }
  int64_t bytes() const override { return shard_nbytes(t_); }
  void cast(at::ScalarType dtype) override {
    if (t_.defined()) t_ = placed_copy(t_, where_, dtype);
  }

 private:
  ShardPlacement where_;
  at::Tensor t_;
};

class NvmeShard : public ParamShard {
 public:
  NvmeShard(NvmeParamSwapper* swapper, size_t slot, int64_t pad_begin)
      : swapper_(swapper), slot_(slot), pad_begin_(pad_begin) {}
  void keep(const at::Tensor& own) override {
    swapper_->acquire(slot_, /*read=*/false).copy_(own);
    swapper_->release(slot_, /*write_back=*/true);
  }
  at::Tensor checkout(bool read) override {
    at::Tensor t = swapper_->acquire(slot_, read);
    // The padding belongs to no parameter and is never stepped; zeros, as in the flat buffer, so
    // the file's bytes do not depend on what the swap buffer held before.
    if (!read && pad_begin_ < t.numel()) t.narrow(0, pad_begin_, t.numel() - pad_begin_).zero_();
    return t;
  }
  void checkin(bool written) override { swapper_->release(slot_, written); }
  void load_into(const at::Tensor& own, bool) override {
    own.copy_(swapper_->acquire(slot_, /*read=*/true));  // the swap buffer is free again at once
    swapper_->release(slot_, /*write_back=*/false);
  }
  int64_t bytes() const override { return 0; }
  void prefetch() override { swapper_->prefetch(slot_); }
  bool on_nvme() const override { return true; }

 private:
  NvmeParamSwapper* swapper_;
  size_t slot_;
  int64_t pad_begin_;
};

class QuantizedShard : public ParamShard {
 public:
  QuantizedShard(const ShardPlacement& where, int64_t shard_numel, int64_t world)
      : where_(where), shard_numel_(shard_numel), world_(world) {}
  void keep(const at::Tensor& own) override {
    quantize_blocks(own, quant_blocks(own.numel()), &q_, &scales_);
    if (where_.host && !q_.is_cpu()) {
      q_ = placed_copy(q_, where_, at::kChar);
      scales_ = placed_copy(scales_, where_, at::kFloat);
    }
  }
  at::Tensor checkout(bool) override { return at::Tensor(); }  // frozen: never stepped
  void load_into(const at::Tensor&, bool) override {
    ZT_INTERNAL_ASSERT(false, "a quantized shard is gathered as blocks");
  }
  GatherPart stored() const override { return {q_, scales_}; }
  at::Tensor stored_values(dist::Communicator& comm, WaitClock& clock) override {
    // The stored blocks themselves, rebuilt in fp32 (a gathered copy holds them in the compute
    // dtype, rounded once more).
    at::Tensor q = q_.to(where_.device), scales = scales_.to(where_.device);
    at::Tensor all_q = at::empty({comm.size() * q.numel()}, q.options());
    at::Tensor all_scales = at::empty({comm.size() * scales.numel()}, scales.options());
    clock.wait(comm.all_gather(q, all_q));
    clock.wait(comm.all_gather(scales, all_scales));
    at::Tensor out = at::empty({world_ * shard_numel_}, q.options().dtype(at::kFloat));
    dequantize_blocks(all_q, all_scales, quant_blocks(shard_numel_), comm.size(), out);
    return out;
  }
  int64_t bytes() const override { return shard_nbytes(q_) + shard_nbytes(scales_); }

 private:
  ShardPlacement where_;
  int64_t shard_numel_, world_;
  at::Tensor q_, scales_;
};

}  // namespace

std::unique_ptr<ParamShard> make_memory_shard(const ShardPlacement& where, at::Tensor adopted) {
  return std::make_unique<MemoryShard>(where, std::move(adopted));
}

std::unique_ptr<ParamShard> make_quantized_shard(const ShardPlacement& where, int64_t shard_numel,
                                                 int64_t world) {
  return std::make_unique<QuantizedShard>(where, shard_numel, world);
}

std::unique_ptr<ParamShard> move_to_nvme(ParamShard& from, NvmeParamSwapper* swapper, size_t slot,
                                         int64_t pad_begin) {
  const at::Tensor values = from.resident();
  ZT_INTERNAL_ASSERT(values.defined(), "only a stage-3 shard in memory moves to NVMe");
  auto to = std::make_unique<NvmeShard>(swapper, slot, pad_begin);
  to->keep(values);
  return to;
}

}  // namespace zt::zero
