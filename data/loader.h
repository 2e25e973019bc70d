#pragma once
// Loader: builds the next batches on background threads so the training step never waits for data.
//
//   Loader loader(dataset, sampler, Collator({.pad_to_multiple = 8}), {.num_workers = 2});
//   loader.set_epoch(e);
//   while (auto batch = loader.next()) { engine.forward(batch->input_ids, ...); }
//   ckpt.sampler = loader.state().to_string();       // consumer position, not the prefetch
//
// Threads: num_workers threads collate batches j = position, position + 1, ... of this rank's
// epoch, at most prefetch_batches ahead of the consumer (a bounded queue: memory stays bounded
// however slow the step). Batches come out in sampler order whatever thread built them, so a
// run is deterministic. A worker's exception stops the prefetch and is rethrown by next() as
// zt::Error naming the batch. The destructor (and set_epoch/load_state) stop and join the
// workers; no thread outlives the Loader.
//
// pin_memory pins each batch's tensors (faster, asynchronous host-to-device copies) when LibTorch
// has CUDA; on a CPU-only run it is skipped with one warning, since pinning needs the CUDA
// runtime.
//
// The source and sampler are borrowed: they must outlive the Loader, and the sampler must not be
// used by anyone else while the Loader runs (the Loader advances it as batches are consumed).

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "data/batch_sampler.h"
#include "data/collator.h"
#include "data/sample_source.h"

namespace zt::data {

struct LoaderOptions {
  int num_workers = 2;       // 0: collate on the caller's thread in next()
  int prefetch_batches = 8;  // batches built ahead of the consumer, at most
  bool pin_memory = false;   // only honoured when CUDA is available
  // Evaluation: the rows of the tail's repeats (Batch::repeated) get the ignore index as every
  // label, so a token-level loss counts each sample once; sample-level metrics read
  // Batch::repeated themselves.
  bool ignore_repeats = false;
};

class Loader {
 public:
  Loader(const SampleSource& source, BatchSampler& sampler, Collator collator,
         LoaderOptions options = {});
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Starts epoch e from its first batch.
  void set_epoch(int64_t epoch);
  // The next batch of this rank, or nullopt at the end of the epoch.
  std::optional<Batch> next();
  // The sampler state after the batches handed out by next() (prefetched ones do not count).
  SamplerState state() const { return sampler_.state(); }
  // Resumes at `state` (the sampler validates it), restarting the workers there.
  void load_state(const SamplerState& state);
  int64_t num_batches() const { return sampler_.num_batches(); }

 private:
  struct Slot {
    std::optional<Batch> batch;
    std::exception_ptr error;
  };

  void start_workers();
  void stop_workers();
  void worker_loop();
  Batch build(int64_t j) const;

  const SampleSource& source_;
  BatchSampler& sampler_;
  Collator collator_;
  LoaderOptions options_;
  bool pin_ = false;

  mutable std::mutex mutex_;
  std::condition_variable work_cv_;   // workers wait for room or stop
  std::condition_variable ready_cv_;  // the consumer waits for its batch
  bool stop_ = false;
  int64_t next_to_build_ = 0;
  int64_t consumed_ = 0;
  std::map<int64_t, Slot> ready_;
  std::exception_ptr failure_;  // sticky: every next() after a failure rethrows it
  std::vector<std::thread> workers_;
};

}  // namespace zt::data
