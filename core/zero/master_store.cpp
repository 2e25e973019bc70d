#include "core/zero/master_store.h"

#include <ATen/ATen.h>

#include "base/error.h"
#include "core/zero/nvme_optimizer.h"
#include "core/zero/pinned_host.h"

namespace zt::zero {

c10::Device master_device(const c10::Device& param_device, bool offload_optimizer) {
  return offload_optimizer ? c10::Device(at::kCPU) : param_device;
}

std::vector<size_t> MasterStore::all_slots() const {
  std::vector<size_t> all(buckets_.size());
  for (size_t b = 0; b < all.size(); ++b) all[b] = b;
  return all;
}

namespace {

c10::Device model_device(const std::vector<std::unique_ptr<Bucket>>& buckets) {
  return buckets.empty() ? c10::Device(at::kCPU) : buckets.front()->params().device();
}

// On the model's device, or in host memory with offload_optimizer cpu.
class ResidentMasters final : public MasterStore {
 public:
  ResidentMasters(const EngineOptions& options, std::vector<std::unique_ptr<Bucket>>& buckets,
                  std::vector<std::string> state_names)
      : MasterStore(buckets, options),
        options_(options),
        device_(master_device(model_device(buckets), options.optimizer_offloaded())),
        masters_(buckets.size()),
        state_names_(std::move(state_names)),
        states_(buckets.size()) {}

  void init() override {
    const c10::Device model = model_device(buckets_);
    for (size_t b = 0; b < buckets_.size(); ++b) {
      // The stepped range: at stage 3 the resident shard (a released buffer holds no values).
      at::Tensor src = buckets_[b]->param_target();
      // The master's place follows the optimizer, never the shard's. The parameters themselves
      // are the master only when they have its dtype (fp32, or bf16 with bf16 masters) and live
      // there too: a CPU model's are in host memory already, offload_optimizer cpu or not; a
      // shard offloaded to the host of a GPU model, or to a file, is not.
      const bool separate = options_.compute_dtype != master_dtype_ || src.device() != device_ ||
                            (options_.optimizer_offloaded() && !model.is_cpu()) ||
                            options_.offload_param.device == OffloadDevice::kNvme;
      const at::TensorOptions on_device = src.options().device(device_);
      states_[b].clear();
      for (size_t i = 0; i < state_names_.size(); ++i) {
        states_[b].push_back(at::zeros({src.numel()}, on_device.dtype(state_dtype_)));
      }
      if (!separate) continue;
      if (device_.is_cpu() && !model.is_cpu()) {
        // Asynchronous copies to the GPU (or another accelerator).
        masters_[b] = pinned_host_copy(src, master_dtype_, model.type());
      } else {
        masters_[b] = at::empty({src.numel()}, on_device.dtype(master_dtype_));
        masters_[b].copy_(src);
      }
    }
  }

  void for_each_chunk(const std::vector<size_t>& slots, const ChunkFn& fn, bool /*read*/,
                      bool /*write_back*/, bool /*with_grads*/) override {
    for (size_t b : slots) {
      MasterChunk c;
      c.slot = b;
      c.master = resident(b);
      c.numel = c.master.numel();
      c.states = states_[b];
      fn(c);
    }
  }

  c10::Device device() const override { return device_; }
  const std::vector<std::string>& state_names() const override { return state_names_; }
  at::Tensor resident(size_t b) const override {
    return masters_[b].defined() ? masters_[b] : buckets_[b]->param_target();
  }
  int64_t master_bytes() const override {
    int64_t n = 0;
    for (const auto& m : masters_) {
      if (m.defined()) n += m.numel() * m.element_size();
    }
    return n;
  }
  int64_t state_bytes() const override {
    int64_t n = 0;
    for (const auto& slot : states_) {
      for (const auto& t : slot) n += t.numel() * t.element_size();
    }
    return n;
  }

 private:
  const EngineOptions& options_;
  c10::Device device_;
  std::vector<at::Tensor> masters_;  // per slot: the separate master, or undefined
  std::vector<std::string> state_names_;
  std::vector<std::vector<at::Tensor>> states_;  // per slot: the state it holds
};

// offload_optimizer nvme: master and state in the swap files of core/zero/nvme_optimizer.h.
class NvmeMasters final : public MasterStore {
 public:
  NvmeMasters(const EngineOptions& options, std::vector<std::unique_ptr<Bucket>>& buckets, int rank,
              std::vector<std::string> state_names, bool spill_grads)
      : MasterStore(buckets, options) {
    std::vector<int64_t> numels;
    for (auto& b : buckets_) numels.push_back(b->stepped().size());
    swapper_ = std::make_unique<NvmeOptimizerSwapper>(
        options.offload_optimizer, options.sub_group_size, options.aio, rank, numels,
        std::move(state_names), master_dtype_, state_dtype_,
        spill_grads ? options.grad_accum_dtype : at::ScalarType::Undefined);
  }

  void init() override {
    swapper_->for_each_chunk(
        all_slots(),
        [&](MasterChunk& c) {
          c.master.copy_(buckets_[c.slot]->param_target().narrow(0, c.begin, c.numel));
          for (auto& s : c.states) s.zero_();
        },
        /*read=*/false, /*write_back=*/true);
  }

  void for_each_chunk(const std::vector<size_t>& slots, const ChunkFn& fn, bool read,
                      bool write_back, bool with_grads) override {
    swapper_->for_each_chunk(slots, fn, read, write_back, with_grads);
  }
  GradSpill* grad_spill() override { return swapper_->holds_grads() ? swapper_.get() : nullptr; }

  c10::Device device() const override { return c10::Device(at::kCPU); }
  const std::vector<std::string>& state_names() const override { return swapper_->state_names(); }
  at::Tensor resident(size_t) const override { return at::Tensor(); }
  std::string swap_directory() const override { return swapper_->directory(); }
  std::vector<FileChunk> file_chunks(size_t b) const override {
    std::vector<FileChunk> out;
    for (const auto& c : swapper_->chunk_files(b)) {
      out.push_back({c.path, c.begin, c.numel, c.offsets});
    }
    return out;
  }
  void set_write_gate(std::function<void(size_t)> gate) override {
    swapper_->set_write_gate(std::move(gate));
  }
  int64_t master_bytes() const override { return 0; }
  int64_t nvme_bytes() const override { return swapper_->nvme_bytes(); }
  int64_t buffer_bytes() const override { return swapper_->buffer_bytes(); }

 private:
  std::unique_ptr<NvmeOptimizerSwapper> swapper_;
};

}  // namespace

std::unique_ptr<MasterStore> make_master_store(const EngineOptions& options,
                                               std::vector<std::unique_ptr<Bucket>>& buckets,
                                               int rank, std::vector<std::string> state_names,
                                               bool spill_grads) {
  if (options.optimizer_on_nvme()) {
    return std::make_unique<NvmeMasters>(options, buckets, rank, std::move(state_names),
                                         spill_grads);
  }
  ZT_INTERNAL_ASSERT(!spill_grads, "gradients spill only to the NVMe optimizer files");
  return std::make_unique<ResidentMasters>(options, buckets, std::move(state_names));
}

}  // namespace zt::zero
