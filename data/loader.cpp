#include "data/loader.h"

#include <ATen/Context.h>

#include "base/error.h"
#include "base/logging.h"

namespace zt::data {

Loader::Loader(const SampleSource& source, BatchSampler& sampler, Collator collator,
               LoaderOptions options)
    : source_(source), sampler_(sampler), collator_(std::move(collator)), options_(options) {
  ZT_CHECK(options_.num_workers >= 0, "loader: num_workers must be >= 0, got ",
           options_.num_workers);
  ZT_CHECK(options_.prefetch_batches >= 1, "loader: prefetch_batches must be >= 1, got ",
           options_.prefetch_batches);
  ZT_CHECK(sampler_.lengths().size() == static_cast<size_t>(source_.size()), "loader: sampler has ",
           sampler_.lengths().size(), " samples, the dataset ", source_.size());
  if (options_.pin_memory) {
    pin_ = at::hasCUDA();
    if (!pin_) ZT_LOG_WARN("loader: pin_memory ignored: LibTorch has no CUDA on this machine");
  }
}

Loader::~Loader() {
  stop_workers();
}

void Loader::set_epoch(int64_t epoch) {
  stop_workers();
  sampler_.set_epoch(epoch);
  failure_ = nullptr;
  start_workers();
}

void Loader::load_state(const SamplerState& state) {
  stop_workers();
  sampler_.load_state(state);
  failure_ = nullptr;
  start_workers();
}

void Loader::start_workers() {
  std::lock_guard<std::mutex> lock(mutex_);
  stop_ = false;
  consumed_ = sampler_.position();
  next_to_build_ = consumed_;
  ready_.clear();
  for (int k = 0; k < options_.num_workers; ++k) workers_.emplace_back([this] { worker_loop(); });
}

void Loader::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
  ready_.clear();
}

Batch Loader::build(int64_t j) const {
  Batch b = collator_.collate(source_, sampler_.batches()[static_cast<size_t>(j)]);
  const std::vector<int64_t>& repeats = sampler_.repeated_slots(j);
  if (!repeats.empty()) {
    const at::Tensor rows = at::tensor(repeats, at::kLong);
    b.repeated = at::zeros({b.batch_size()}, at::kBool).index_fill_(0, rows, true);
    if (options_.ignore_repeats) b.labels.index_fill_(0, rows, collator_.options().ignore_index);
  }
  if (pin_) {
    b.input_ids = b.input_ids.pin_memory();
    b.attention_mask = b.attention_mask.pin_memory();
    b.labels = b.labels.pin_memory();
    if (b.sample_labels.defined()) b.sample_labels = b.sample_labels.pin_memory();
  }
  return b;
}

void Loader::worker_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  const int64_t end = sampler_.num_batches();
  while (true) {
    work_cv_.wait(lock, [&] {
      return stop_ ||
             (next_to_build_ < end && next_to_build_ < consumed_ + options_.prefetch_batches);
    });
    if (stop_) return;
    const int64_t j = next_to_build_++;
    lock.unlock();
    Slot slot;
    try {
      slot.batch = build(j);
    } catch (...) {
      slot.error = std::current_exception();
    }
    lock.lock();
    const bool failed = static_cast<bool>(slot.error);
    ready_[j] = std::move(slot);
    // After a failure build nothing more: the consumer will stop at batch j anyway.
    if (failed) next_to_build_ = end;
    ready_cv_.notify_one();  // the one consumer
  }
}

std::optional<Batch> Loader::next() {
  ZT_CHECK(sampler_.epoch() >= 0, "loader: call set_epoch(e) before next()");
  if (failure_) std::rethrow_exception(failure_);
  if (!sampler_.has_next()) return std::nullopt;
  const int64_t j = sampler_.position();
  Slot slot;
  if (options_.num_workers == 0) {
    try {
      slot.batch = build(j);
    } catch (...) {
      slot.error = std::current_exception();
    }
  } else {
    std::unique_lock<std::mutex> lock(mutex_);
    ready_cv_.wait(lock, [&] { return ready_.count(j) > 0; });
    auto it = ready_.find(j);
    slot = std::move(it->second);
    ready_.erase(it);
    if (!slot.error) {
      consumed_ = j + 1;
    }
    work_cv_.notify_one();  // one slot of room: one more batch to build
  }
  if (slot.error) {
    try {
      try {
        std::rethrow_exception(slot.error);
      } catch (const zt::Error& e) {
        ZT_THROW("loader: batch ", j, " of epoch ", sampler_.epoch(), " failed: ", e.message());
      } catch (const std::exception& e) {
        std::string what = e.what();  // LibTorch appends a backtrace: keep the first line
        what = what.substr(0, what.find('\n'));
        ZT_THROW("loader: batch ", j, " of epoch ", sampler_.epoch(), " failed: ", what);
      }
    } catch (...) {
      failure_ = std::current_exception();
      throw;
    }
  }
  sampler_.next();
  return std::move(slot.batch);
}

}  // namespace zt::data
