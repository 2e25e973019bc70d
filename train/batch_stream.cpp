#include "train/batch_stream.h"

#include <algorithm>

#include "base/error.h"
#include "data/collator.h"
#include "data/sequence_split.h"

namespace zt {

BatchStream::BatchStream(std::shared_ptr<const data::TokenDataset> dataset, const Config& c,
                         const dist::Communicator& comm, BatchStreamOptions o)
    : dataset_(std::move(dataset)), training_(o.training), device_(o.device) {
  ZT_CHECK(dataset_ != nullptr, "BatchStream: no dataset");
  const DataConfig& d = c.data;
  const int64_t max_len = o.max_length > 0 ? std::min(d.max_length, o.max_length) : d.max_length;
  const int64_t pad_multiple = o.pad_to_multiple.value_or(d.pad_to_multiple);
  data::SamplerOptions so;
  so.max_tokens = d.max_tokens;
  so.batch_size = d.max_tokens > 0 ? 0 : c.train_micro_batch_size_per_gpu;
  so.mega_batch_mult = d.mega_batch_mult;
  // Evaluation draws its own order (seed + 1), so it never mirrors the training epoch's.
  so.seed = static_cast<uint64_t>(d.seed.value_or(c.seed)) + (o.training ? 0 : 1);
  so.tail = d.drop_last && o.training ? data::TailPolicy::kDrop : data::TailPolicy::kPadByRepeat;
  // A sequence group reads one batch (its data-parallel index's) and splits it along the sequence;
  // the ranks of a tensor group read the same batch (the mesh rank is ((data · sp) + sequence) ·
  // tp + tensor, parallel/topology.h).
  const int sp = c.sequence_parallel_size, tp = c.tensor_parallel.size();
  ZT_CHECK(sp >= 1 && comm.size() % (sp * tp) == 0, "sequence_parallel_size ", sp,
           " times tensor_parallel.autotp_size ", tp, " must divide the number of ranks (",
           comm.size(), ")");
  const int group_rank = comm.rank() / tp;
  so.rank = group_rank / sp;
  so.world_size = comm.size() / (sp * tp);
  parts_ = sp;
  part_ = group_rank % sp;
  so.max_length = o.causal_lm_shift ? max_len + 1 : max_len;
  so.pad_to_multiple = pad_multiple;
  if (!o.training || o.bucketing.value_or(d.bucketing)) {
    sampler_ = std::make_unique<data::LengthBucketedSampler>(dataset_->lengths(), so);
  } else {
    sampler_ = std::make_unique<data::RandomBatchSampler>(dataset_->lengths(), so);
  }
  data::CollatorOptions co;
  co.pad_id = dataset_->pad_id();  // the tokenizer's, from the shard; throws naming the file
  pad_id_ = co.pad_id;
  co.pad_to_multiple = pad_multiple;
  co.max_length = max_len;
  co.causal_lm_shift = o.causal_lm_shift;
  loader_ = std::make_unique<data::Loader>(
      *dataset_, *sampler_, data::Collator(co),
      data::LoaderOptions{.num_workers = o.num_workers, .ignore_repeats = !o.training});
  loader_->set_epoch(0);
}

std::optional<data::Batch> BatchStream::next() {
  auto b = loader_->next();
  if (!b && training_) {
    loader_->set_epoch(++epoch_);
    b = loader_->next();
  }
  if (b && parts_ > 1) *b = data::sequence_part(*b, part_, parts_, pad_id_);
  if (b && device_ && !device_->is_cpu()) {
    for (at::Tensor* t : {&b->input_ids, &b->attention_mask, &b->labels, &b->sample_labels,
                          &b->indices, &b->repeated}) {
      if (t->defined()) *t = t->to(*device_);
    }
  }
  return b;
}

void BatchStream::restart() {
  epoch_ = 0;
  loader_->set_epoch(0);
}

void BatchStream::load_sampler_state(const std::string& state) {
  const data::SamplerState s = data::SamplerState::parse(state);
  loader_->load_state(s);
  epoch_ = s.epoch;
}

void BatchStream::start_epoch(int64_t epoch) {
  epoch_ = epoch;
  loader_->set_epoch(epoch);
}

}  // namespace zt
