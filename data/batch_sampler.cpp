#include "data/batch_sampler.h"

#include <algorithm>
#include <numeric>
#include <sstream>

#include "base/error.h"
#include "data/random.h"
#include "data/token_shard_format.h"

namespace zt::data {
namespace {

// Stream ids, so the sample permutation and the step shuffle of one epoch are independent.
constexpr uint64_t kOrderStream = 0x0a11;
constexpr uint64_t kStepStream = 0x57e9;

uint64_t epoch_stream(uint64_t base, int64_t epoch) {
  return base * 0x100000001b3ULL ^ static_cast<uint64_t>(epoch);
}

}  // namespace

// ---- SamplerState ----------------------------------------------------------------------------

namespace {

std::string history_text(const std::vector<SamplerSegment>& history) {
  if (history.empty()) return "-";
  std::string out;
  for (const SamplerSegment& g : history) {
    if (!out.empty()) out += ",";
    out += std::to_string(g.world_size) + "x" + std::to_string(g.batch_size) + "x" +
           std::to_string(g.steps);
  }
  return out;
}

// "4x8x30,2x8x12" -> segments; "-" -> none.
std::vector<SamplerSegment> parse_history(const std::string& text) {
  std::vector<SamplerSegment> out;
  if (text == "-") return out;
  std::istringstream is(text);
  for (std::string item; std::getline(is, item, ',');) {
    SamplerSegment g;
    char x1 = 0, x2 = 0;
    std::istringstream fields(item);
    fields >> g.world_size >> x1 >> g.batch_size >> x2 >> g.steps;
    ZT_CHECK(fields && x1 == 'x' && x2 == 'x' && fields.peek() == EOF && g.world_size >= 1 &&
                 g.batch_size >= 0 && g.steps >= 0,
             "sampler state: history entry '", item, "' is not WORLDxBATCHxSTEPS");
    out.push_back(g);
  }
  return out;
}

}  // namespace

std::string SamplerState::to_string() const {
  std::ostringstream os;
  os << "zt-sampler-state v2 seed=" << seed << " epoch=" << epoch << " next_batch=" << next_batch
     << " num_samples=" << num_samples << " world_size=" << world_size << " rank=" << rank
     << " batch_size=" << batch_size << " history=" << history_text(history)
     << " fingerprint=" << fingerprint;
  return os.str();
}

SamplerState SamplerState::parse(const std::string& text) {
  std::istringstream is(text);
  std::string magic, version;
  is >> magic >> version;
  ZT_CHECK(magic == "zt-sampler-state" && (version == "v1" || version == "v2"),
           "sampler state: expected 'zt-sampler-state v2 ...', got '", text, "'");
  const bool v1 = version == "v1";
  SamplerState s;
  s.batch_size = -1;
  int seen = 0;
  for (std::string kv; is >> kv;) {
    auto eq = kv.find('=');
    ZT_CHECK(eq != std::string::npos, "sampler state: field '", kv, "' is not key=value");
    std::string key = kv.substr(0, eq), value = kv.substr(eq + 1);
    try {
      size_t used = value.size();
      if (key == "seed")
        s.seed = std::stoull(value, &used);
      else if (key == "epoch")
        s.epoch = std::stoll(value, &used);
      else if (key == "next_batch")
        s.next_batch = std::stoll(value, &used);
      else if (key == "num_samples")
        s.num_samples = std::stoll(value, &used);
      else if (key == "world_size")
        s.world_size = std::stoll(value, &used);
      else if (key == "rank")
        s.rank = std::stoll(value, &used);
      else if (key == "fingerprint")
        s.fingerprint = std::stoull(value, &used);
      else if (key == "batch_size" && !v1)
        s.batch_size = std::stoll(value, &used);
      else if (key == "history" && !v1)
        s.history = parse_history(value);
      else
        ZT_THROW("sampler state: unknown field '", key, "'");
      ZT_CHECK(used == value.size(), "sampler state: field ", key, " has a bad value '", value,
               "'");
    } catch (const std::invalid_argument&) {
      ZT_THROW("sampler state: field ", key, " has a bad value '", value, "'");
    } catch (const std::out_of_range&) {
      ZT_THROW("sampler state: field ", key, " is out of range: '", value, "'");
    }
    ++seen;
  }
  const int expected = v1 ? 7 : 9;
  ZT_CHECK(seen == expected, "sampler state: expected ", expected, " fields, got ", seen, " in '",
           text, "'");
  ZT_CHECK(s.world_size >= 1 && s.rank >= 0 && s.rank < s.world_size && s.next_batch >= 0 &&
               s.epoch >= 0 && (v1 || s.batch_size >= 0),
           "sampler state: inconsistent fields in '", text, "'");
  return s;
}

bool SamplerState::operator==(const SamplerState& o) const {
  return seed == o.seed && epoch == o.epoch && next_batch == o.next_batch &&
         num_samples == o.num_samples && world_size == o.world_size && rank == o.rank &&
         batch_size == o.batch_size && history == o.history && fingerprint == o.fingerprint;
}

// ---- BatchSampler ----------------------------------------------------------------------------

BatchSampler::BatchSampler(std::vector<int64_t> lengths, SamplerOptions options, const char* kind)
    : lengths_(std::move(lengths)), options_(options) {
  const SamplerOptions& o = options_;
  ZT_CHECK(!lengths_.empty(), kind, ": the dataset is empty");
  ZT_CHECK((o.batch_size > 0) != (o.max_tokens > 0), kind,
           ": set exactly one of batch_size and max_tokens (got batch_size=", o.batch_size,
           ", max_tokens=", o.max_tokens, ")");
  ZT_CHECK(o.world_size >= 1 && o.rank >= 0 && o.rank < o.world_size, kind, ": rank ", o.rank,
           " is not in [0, world_size=", o.world_size, ")");
  ZT_CHECK(o.mega_batch_mult >= 1, kind, ": mega_batch_mult must be >= 1, got ", o.mega_batch_mult);
  ZT_CHECK(o.pad_to_multiple >= 1 && o.max_length >= 0 && o.max_batch_size >= 0, kind,
           ": pad_to_multiple must be >= 1 and max_length, max_batch_size >= 0");
  const auto n = static_cast<int64_t>(lengths_.size());
  for (int64_t i = 0; i < n; ++i) {
    ZT_CHECK(lengths_[i] >= 0, kind, ": sample ", i, " has negative length ", lengths_[i]);
    if (o.max_tokens > 0) {
      ZT_CHECK(round_length(capped_length(i)) <= o.max_tokens, kind, ": sample ", i, " has ",
               lengths_[i], " tokens (", round_length(capped_length(i)),
               " padded), more than max_tokens=", o.max_tokens,
               "; raise max_tokens or set max_length");
    }
  }
  if (o.batch_size > 0 && o.tail == TailPolicy::kDrop) {
    ZT_CHECK(n >= o.batch_size * o.world_size, kind, ": ", n,
             " samples do not fill one step of batch_size*world_size = ",
             o.batch_size * o.world_size, " with tail=drop");
  }
}

int64_t BatchSampler::capped_length(int64_t i) const {
  const int64_t len = lengths_[static_cast<size_t>(i)];
  return options_.max_length > 0 ? std::min(len, options_.max_length) : len;
}

int64_t BatchSampler::round_length(int64_t len) const {
  const int64_t m = options_.pad_to_multiple;
  int64_t t = (len + m - 1) / m * m;
  // The collator never pads beyond max_length, even when it is not a multiple.
  if (options_.max_length > 0) t = std::min(t, options_.max_length);
  return t;
}

int64_t BatchSampler::padded_length(const std::vector<int64_t>& batch) const {
  int64_t longest = 0;
  for (int64_t i : batch) longest = std::max(longest, capped_length(i));
  return round_length(longest);
}

void BatchSampler::set_epoch(int64_t epoch) {
  ZT_CHECK(epoch >= 0, "sampler: epoch must be >= 0, got ", epoch);
  build(epoch, {});
}

SamplerOptions BatchSampler::layout(const SamplerSegment& segment) const {
  SamplerOptions o = options_;
  o.world_size = segment.world_size;
  o.batch_size = segment.batch_size;
  o.rank = 0;
  return o;
}

namespace {

// The step shuffle of each layout of an epoch; the first one keeps the stream a sampler that was
// never resized uses.
uint64_t layout_stream(int64_t epoch, size_t layout_index) {
  return epoch_stream(kStepStream, epoch) + 0x9e3779b97f4a7c15ULL * layout_index;
}

// `pool` without the samples marked in `taken_mask`.
std::vector<int64_t> untaken(const std::vector<int64_t>& pool,
                             const std::vector<char>& taken_mask) {
  std::vector<int64_t> out;
  out.reserve(pool.size());
  for (int64_t i : pool) {
    if (!taken_mask[static_cast<size_t>(i)]) out.push_back(i);
  }
  return out;
}

}  // namespace

std::vector<int64_t> BatchSampler::taken(int64_t epoch,
                                         const std::vector<SamplerSegment>& history) const {
  const auto n = static_cast<int64_t>(lengths_.size());
  std::vector<int64_t> pool = permutation(n, options_.seed, epoch_stream(kOrderStream, epoch));
  std::vector<char> mask(lengths_.size(), 0);
  std::vector<int64_t> order;
  for (size_t k = 0; k < history.size(); ++k) {
    const SamplerSegment& g = history[k];
    const std::vector<std::vector<int64_t>> batches =
        plan(pool, layout(g), layout_stream(epoch, k));
    const auto w = static_cast<size_t>(g.world_size);
    ZT_CHECK(static_cast<size_t>(g.steps) * w <= batches.size(), "sampler state: epoch ", epoch,
             " layout ", k, " (", g.world_size, " ranks) took ", g.steps,
             " steps, but it has only ", batches.size() / w);
    for (size_t b = 0; b < static_cast<size_t>(g.steps) * w; ++b) {
      for (int64_t i : batches[b]) {
        if (!mask[static_cast<size_t>(i)]) order.push_back(i);
        mask[static_cast<size_t>(i)] = 1;
      }
    }
    pool = untaken(pool, mask);
  }
  return order;
}

void BatchSampler::build(int64_t epoch, std::vector<SamplerSegment> history) {
  const auto n = static_cast<int64_t>(lengths_.size());
  std::vector<int64_t> pool = permutation(n, options_.seed, epoch_stream(kOrderStream, epoch));
  if (!history.empty()) {
    std::vector<char> mask(lengths_.size(), 0);
    for (int64_t i : taken(epoch, history)) mask[static_cast<size_t>(i)] = 1;
    pool = untaken(pool, mask);
  }
  std::vector<std::vector<int64_t>> all =
      plan(pool, options_, layout_stream(epoch, history.size()));
  const int64_t w = options_.world_size;
  ZT_INTERNAL_ASSERT(static_cast<int64_t>(all.size()) % w == 0);
  steps_.assign(all.size() / static_cast<size_t>(w), {});
  rank_batches_.clear();
  rank_repeats_.clear();
  std::vector<char> seen(lengths_.size(), 0);
  for (size_t s = 0; s < steps_.size(); ++s) {
    for (int64_t r = 0; r < w; ++r) {
      steps_[s].push_back(std::move(all[s * static_cast<size_t>(w) + static_cast<size_t>(r)]));
      const std::vector<int64_t>& batch = steps_[s].back();
      std::vector<int64_t> repeats;
      for (size_t j = 0; j < batch.size(); ++j) {
        char& was = seen[static_cast<size_t>(batch[j])];
        if (was) repeats.push_back(static_cast<int64_t>(j));
        was = 1;
      }
      if (r == options_.rank) rank_repeats_.push_back(std::move(repeats));
    }
    rank_batches_.push_back(steps_[s][static_cast<size_t>(options_.rank)]);
  }
  epoch_ = epoch;
  next_batch_ = 0;
  history_ = std::move(history);
}

const std::vector<int64_t>& BatchSampler::repeated_slots(int64_t batch) const {
  ZT_CHECK(batch >= 0 && batch < num_batches(), "sampler: batch ", batch, " of ", num_batches());
  return rank_repeats_[static_cast<size_t>(batch)];
}

const std::vector<int64_t>& BatchSampler::next() {
  ZT_CHECK(epoch_ >= 0, "sampler: call set_epoch(e) before next()");
  ZT_CHECK(has_next(), "sampler: epoch ", epoch_, " has no batch left (", num_batches(),
           " handed out)");
  return rank_batches_[static_cast<size_t>(next_batch_++)];
}

uint64_t BatchSampler::fingerprint(int64_t batch_size) const {
  ShardChecksum sum;
  sum.update(lengths_.data(), lengths_.size() * sizeof(int64_t));
  const SamplerOptions& o = options_;
  const int64_t fields[] = {batch_size,
                            o.max_tokens,
                            o.max_batch_size,
                            o.mega_batch_mult,
                            static_cast<int64_t>(o.tail),
                            o.max_length,
                            o.pad_to_multiple,
                            o.longest_first ? 1 : 0};
  sum.update(fields, sizeof(fields));
  return sum.digest();
}

SamplerState BatchSampler::state() const {
  SamplerState s;
  s.seed = options_.seed;
  s.epoch = std::max<int64_t>(epoch_, 0);
  s.next_batch = epoch_ >= 0 ? next_batch_ : 0;
  s.num_samples = static_cast<int64_t>(lengths_.size());
  s.world_size = options_.world_size;
  s.rank = options_.rank;
  s.batch_size = options_.batch_size;
  s.history = history_;
  s.fingerprint = fingerprint(options_.batch_size);
  return s;
}

void BatchSampler::load_state(const SamplerState& s) {
  const SamplerOptions& o = options_;
  const auto n = static_cast<int64_t>(lengths_.size());
  ZT_CHECK(s.num_samples == n, "sampler state: saved for a dataset of ", s.num_samples,
           " samples, this one has ", n);
  ZT_CHECK(s.seed == o.seed, "sampler state: saved with seed ", s.seed, ", this sampler has ",
           o.seed);
  const bool resized = s.world_size != o.world_size;
  // A v1 state predates resizing: it was saved at this sampler's batch size or does not fit.
  const int64_t saved_batch = s.batch_size < 0 ? o.batch_size : s.batch_size;
  if (!resized) {
    ZT_CHECK(s.rank == o.rank, "sampler state: saved by rank ", s.rank, " of ", s.world_size,
             ", loading on rank ", o.rank, " of ", o.world_size);
    ZT_CHECK(saved_batch == o.batch_size, "sampler state: saved with batch size ", saved_batch,
             ", this sampler has ", o.batch_size, " at the same world size ", o.world_size);
  }
  ZT_CHECK(s.fingerprint == fingerprint(saved_batch),
           "sampler state: sample lengths or batching options differ from the saved run");
  ZT_CHECK((saved_batch > 0) == (o.batch_size > 0), "sampler state: saved in ",
           saved_batch > 0 ? "batch_size" : "max_tokens", " mode, this sampler uses the other");
  if (!resized) {
    build(s.epoch, s.history);
    ZT_CHECK(s.next_batch <= num_batches(), "sampler state: next_batch ", s.next_batch,
             " is past the ", num_batches(), " batches of epoch ", s.epoch);
    next_batch_ = s.next_batch;
    return;
  }
  // Resized: the saved layout becomes history (every rank of it had taken next_batch batches,
  // one per step), and the rest of the epoch is planned for this world size.
  std::vector<SamplerSegment> history = s.history;
  history.push_back({s.world_size, saved_batch, s.next_batch});
  build(s.epoch, std::move(history));
}

EpochCoverage BatchSampler::coverage() const {
  EpochCoverage c;
  std::vector<int64_t> count(lengths_.size(), 0);
  for (const auto& step : steps_) {
    for (const auto& batch : step) {
      ++c.num_batches;
      for (int64_t i : batch) {
        ++count[static_cast<size_t>(i)];
        ++c.num_samples;
      }
    }
  }
  for (size_t i = 0; i < count.size(); ++i) {
    if (count[i] == 0) c.dropped.push_back(static_cast<int64_t>(i));
    for (int64_t k = 1; k < count[i]; ++k) c.repeated.push_back(static_cast<int64_t>(i));
  }
  return c;
}

std::vector<int64_t> BatchSampler::with_tail(std::vector<int64_t> order,
                                             const SamplerOptions& o) const {
  const auto n = static_cast<int64_t>(order.size());
  if (o.batch_size == 0 || n == 0) return order;  // token mode: the tail is whole batches
  const int64_t step = o.batch_size * o.world_size;
  if (o.tail == TailPolicy::kDrop) {
    order.resize(static_cast<size_t>(n / step * step));
  } else {
    const int64_t target = (n + step - 1) / step * step;
    for (int64_t k = 0; static_cast<int64_t>(order.size()) < target; ++k) {
      order.push_back(order[static_cast<size_t>(k % n)]);
    }
  }
  return order;
}

std::vector<std::vector<int64_t>> BatchSampler::cut(const std::vector<int64_t>& order,
                                                    const SamplerOptions& o) const {
  std::vector<std::vector<int64_t>> batches;
  if (o.batch_size > 0) {
    for (size_t k = 0; k < order.size(); k += static_cast<size_t>(o.batch_size)) {
      const size_t end = std::min(order.size(), k + static_cast<size_t>(o.batch_size));
      batches.emplace_back(order.begin() + static_cast<std::ptrdiff_t>(k),
                           order.begin() + static_cast<std::ptrdiff_t>(end));
    }
    return batches;
  }
  std::vector<int64_t> current;
  int64_t longest = 0;
  for (int64_t i : order) {
    const int64_t t = round_length(std::max(longest, capped_length(i)));
    const bool full =
        o.max_batch_size > 0 && static_cast<int64_t>(current.size()) >= o.max_batch_size;
    if (!current.empty() &&
        (full || (static_cast<int64_t>(current.size()) + 1) * t > o.max_tokens)) {
      batches.push_back(std::move(current));
      current.clear();
      longest = 0;
    }
    current.push_back(i);
    longest = std::max(longest, capped_length(i));
  }
  if (!current.empty()) batches.push_back(std::move(current));
  return batches;
}

void BatchSampler::fit_to_world(std::vector<std::vector<int64_t>>* batches,
                                const SamplerOptions& o) const {
  const auto w = static_cast<size_t>(o.world_size);
  const size_t extra = batches->size() % w;
  if (extra == 0) return;
  if (o.tail == TailPolicy::kDrop && batches->size() >= w) {
    batches->resize(batches->size() - extra);
    return;
  }
  // Repeat whole batches from the start: each already respects the budget.
  const size_t n = batches->size();
  for (size_t k = 0; batches->size() % w != 0; ++k) batches->push_back((*batches)[k % n]);
}

// ---- LengthBucketedSampler -------------------------------------------------------------------

LengthBucketedSampler::LengthBucketedSampler(std::vector<int64_t> lengths, SamplerOptions options)
    : BatchSampler(std::move(lengths), options, "LengthBucketedSampler") {}

std::vector<std::vector<int64_t>> LengthBucketedSampler::plan(const std::vector<int64_t>& pool,
                                                              const SamplerOptions& o,
                                                              uint64_t step_stream) const {
  std::vector<int64_t> order = with_tail(pool, o);
  // Mega-batch size in samples. In token mode the batch size varies, so estimate it from the
  // mean padded length.
  int64_t batch = o.batch_size;
  if (batch == 0) {
    double mean = 0;
    for (size_t i = 0; i < lengths_.size(); ++i) {
      mean += static_cast<double>(round_length(capped_length(static_cast<int64_t>(i))));
    }
    mean = std::max(1.0, mean / static_cast<double>(lengths_.size()));
    batch = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(o.max_tokens) / mean));
    if (o.max_batch_size > 0) batch = std::min(batch, o.max_batch_size);
  }
  const auto mega = static_cast<size_t>(o.mega_batch_mult * batch * o.world_size);

  std::vector<std::vector<int64_t>> batches;
  for (size_t begin = 0; begin < order.size(); begin += mega) {
    const size_t end = std::min(order.size(), begin + mega);
    std::vector<int64_t> group(order.begin() + static_cast<std::ptrdiff_t>(begin),
                               order.begin() + static_cast<std::ptrdiff_t>(end));
    // Stable: equal lengths keep the permutation's order, so the plan is a function of the seed.
    std::stable_sort(group.begin(), group.end(),
                     [&](int64_t a, int64_t b) { return capped_length(a) > capped_length(b); });
    for (auto& b : cut(group, o)) batches.push_back(std::move(b));
  }
  fit_to_world(&batches, o);

  // Shuffle whole steps, never batches across steps: the W batches of a step were neighbours in
  // a sorted mega-batch, so the ranks wait on each other as little as possible.
  const auto w = static_cast<size_t>(o.world_size);
  std::vector<size_t> step_order(batches.size() / w);
  std::iota(step_order.begin(), step_order.end(), size_t{0});
  Rng rng(mix_seed(o.seed, step_stream));
  shuffle(step_order, rng);
  if (o.longest_first && !step_order.empty()) {
    size_t best = 0;
    int64_t best_len = -1;
    for (size_t k = 0; k < step_order.size(); ++k) {
      for (size_t r = 0; r < w; ++r) {
        const int64_t t = padded_length(batches[step_order[k] * w + r]);
        if (t > best_len) best_len = t, best = k;
      }
    }
    std::swap(step_order[0], step_order[best]);
  }
  std::vector<std::vector<int64_t>> out;
  out.reserve(batches.size());
  for (size_t s : step_order) {
    for (size_t r = 0; r < w; ++r) out.push_back(std::move(batches[s * w + r]));
  }
  return out;
}

// ---- RandomBatchSampler ----------------------------------------------------------------------

RandomBatchSampler::RandomBatchSampler(std::vector<int64_t> lengths, SamplerOptions options)
    : BatchSampler(std::move(lengths), options, "RandomBatchSampler") {}

std::vector<std::vector<int64_t>> RandomBatchSampler::plan(const std::vector<int64_t>& pool,
                                                           const SamplerOptions& o,
                                                           uint64_t /*step_stream*/) const {
  std::vector<std::vector<int64_t>> batches = cut(with_tail(pool, o), o);
  fit_to_world(&batches, o);
  return batches;
}

}  // namespace zt::data
