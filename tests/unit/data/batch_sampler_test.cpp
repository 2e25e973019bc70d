#include "data/batch_sampler.h"

#include <algorithm>
#include <map>
#include <memory>
#include <numeric>
#include <tuple>

#include <gtest/gtest.h>

#include "base/error.h"
#include "data/random.h"

namespace zt::data {
namespace {

// A long-tailed length distribution like the fortunes corpus: mostly short, a few long.
std::vector<int64_t> skewed_lengths(int64_t n, uint64_t seed = 3) {
  Rng rng(seed);
  std::vector<int64_t> out;
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t r = rng.below(100);
    out.push_back(r < 80 ? 2 + static_cast<int64_t>(rng.below(30))
                         : 30 + static_cast<int64_t>(rng.below(r < 98 ? 100 : 400)));
  }
  return out;
}

enum class Kind { kBucketed, kRandom };

std::unique_ptr<BatchSampler> make(Kind kind, const std::vector<int64_t>& lengths,
                                   const SamplerOptions& o) {
  if (kind == Kind::kBucketed) return std::make_unique<LengthBucketedSampler>(lengths, o);
  return std::make_unique<RandomBatchSampler>(lengths, o);
}

// (sampler kind, world size); every test loops over the batch sizing modes and tail policies
// inside (one process per ctest case costs a LibTorch load, so the sweep is kept to 8 cases).
using Param = std::tuple<Kind, int64_t>;

struct Mode {
  bool by_count;
  TailPolicy tail;
};
const Mode kModes[] = {{true, TailPolicy::kDrop},
                       {true, TailPolicy::kPadByRepeat},
                       {false, TailPolicy::kDrop},
                       {false, TailPolicy::kPadByRepeat}};

std::string mode_name(const Mode& m) {
  return std::string(m.by_count ? "batch_size" : "max_tokens") +
         (m.tail == TailPolicy::kDrop ? " drop" : " repeat");
}

class SamplerSweep : public ::testing::TestWithParam<Param> {
 protected:
  SamplerOptions options(int64_t rank, const Mode& m) const {
    SamplerOptions o;
    if (m.by_count) {
      o.batch_size = 7;
    } else {
      o.max_tokens = 600;
    }
    o.mega_batch_mult = 5;
    o.seed = 11;
    o.tail = m.tail;
    o.rank = rank;
    o.world_size = world();
    o.pad_to_multiple = 8;
    return o;
  }
  Kind kind() const { return std::get<0>(GetParam()); }
  int64_t world() const { return std::get<1>(GetParam()); }
  void check_epoch(const Mode& mode) const;
  void check_determinism(const Mode& mode) const;
  void check_resume(const Mode& mode) const;
  void check_resize(const Mode& mode) const;

  const std::vector<int64_t> lengths_ = skewed_lengths(1003);
};

TEST_P(SamplerSweep, EveryRankGetsItsShareAndEverySampleIsAccountedFor) {
  for (const Mode& mode : kModes) {
    SCOPED_TRACE(mode_name(mode));
    check_epoch(mode);
  }
}

TEST_P(SamplerSweep, DeterministicFromSeedAndEpochAndDifferentAcrossEpochs) {
  for (const Mode& mode : kModes) {
    SCOPED_TRACE(mode_name(mode));
    check_determinism(mode);
  }
}

TEST_P(SamplerSweep, ResumesMidEpochToTheIdenticalSequence) {
  for (const Mode& mode : kModes) {
    SCOPED_TRACE(mode_name(mode));
    check_resume(mode);
  }
}

// An evaluation over every rank's batches counts each sample once when it leaves out the slots
// repeated_slots() names: together they are exactly the tail's extra copies (coverage()), and
// what is left holds every sample of the epoch that was not dropped, once. 1003 samples: the
// last step is never full, so with kPadByRepeat there are repeats to leave out.
TEST_P(SamplerSweep, ValidationLeavesOutTheTailsRepeats) {
  for (const Mode& mode : kModes) {
    SCOPED_TRACE(mode_name(mode));
    std::map<int64_t, int64_t> counted;
    int64_t left_out = 0;
    EpochCoverage coverage;
    for (int64_t r = 0; r < world(); ++r) {
      auto s = make(kind(), lengths_, options(r, mode));
      s->set_epoch(0);
      if (r == 0) coverage = s->coverage();
      for (int64_t j = 0; j < s->num_batches(); ++j) {
        const std::vector<int64_t>& batch = s->batches()[static_cast<size_t>(j)];
        const std::vector<int64_t>& repeats = s->repeated_slots(j);
        left_out += static_cast<int64_t>(repeats.size());
        for (size_t slot = 0; slot < batch.size(); ++slot) {
          if (std::find(repeats.begin(), repeats.end(), static_cast<int64_t>(slot)) ==
              repeats.end()) {
            ++counted[batch[slot]];
          }
        }
      }
    }
    EXPECT_EQ(left_out, static_cast<int64_t>(coverage.repeated.size()));
    if (mode.tail == TailPolicy::kPadByRepeat && mode.by_count) {
      EXPECT_GT(left_out, 0);
    }
    EXPECT_EQ(static_cast<int64_t>(counted.size()) + static_cast<int64_t>(coverage.dropped.size()),
              static_cast<int64_t>(lengths_.size()));
    for (const auto& [sample, times] : counted) ASSERT_EQ(times, 1) << "sample " << sample;
  }
}

// An elastic job: the epoch starts at world(), goes on at another world size and micro batch from
// one rank's saved state, then ends at a third; every sample of the epoch is taken once, apart
// from what the tail policy drops or repeats.
TEST_P(SamplerSweep, ElasticResizeTakesEverySampleOnce) {
  for (const Mode& mode : kModes) {
    SCOPED_TRACE(mode_name(mode));
    check_resize(mode);
  }
}

void SamplerSweep::check_resize(const Mode& mode) const {
  const int64_t worlds[] = {world(), world() == 8 ? 3 : world() + 2, 2};
  const int64_t batch_sizes[] = {7, 5, 7};  // the elastic micro batch may change with the world
  const auto n = static_cast<int64_t>(lengths_.size());
  std::vector<int64_t> count(lengths_.size(), 0);
  int64_t tail_bound = 0;  // samples the layouts' tails may repeat, at most
  std::string saved;
  for (int layout = 0; layout < 3; ++layout) {
    SCOPED_TRACE("layout " + std::to_string(layout));
    const int64_t w = worlds[layout];
    std::vector<std::unique_ptr<BatchSampler>> ranks;
    for (int64_t r = 0; r < w; ++r) {
      SamplerOptions o = options(r, mode);
      o.world_size = w;
      if (mode.by_count) o.batch_size = batch_sizes[layout];
      ranks.push_back(make(kind(), lengths_, o));
      ranks.back()->set_epoch(layout == 0 ? 4 : 0);
      if (layout > 0) ranks.back()->load_state(SamplerState::parse(saved));
      ASSERT_EQ(ranks.back()->epoch(), 4);
      ASSERT_EQ(ranks.back()->history().size(), static_cast<size_t>(layout));
      ASSERT_EQ(ranks.back()->num_batches(), ranks[0]->num_batches());
    }
    // Largest batch of the layout's plan: its tail repeats less than a step of them.
    size_t largest = 0;
    for (const auto& step : ranks[0]->steps()) {
      for (const auto& b : step) largest = std::max(largest, b.size());
    }
    tail_bound += static_cast<int64_t>(largest) * w;
    const int64_t steps =
        layout < 2 ? std::max<int64_t>(1, ranks[0]->num_batches() / 3) : ranks[0]->num_batches();
    for (int64_t k = 0; k < steps; ++k) {
      for (auto& rank : ranks) {
        for (int64_t i : rank->next()) ++count[static_cast<size_t>(i)];
      }
    }
    saved = ranks[w - 1]->state().to_string();
    if (layout == 1) {
      // An exact resume inside a resized epoch replays the history to the same batches.
      auto again = make(kind(), lengths_, ranks[0]->options());
      again->load_state(ranks[0]->state());
      EXPECT_EQ(again->state(), ranks[0]->state());
      while (again->has_next()) EXPECT_EQ(again->next(), ranks[0]->next());
      EXPECT_FALSE(ranks[0]->has_next());
    }
  }
  int64_t dropped = 0, repeats = 0;
  for (int64_t c : count) {
    if (c == 0) ++dropped;
    if (c > 1) repeats += c - 1;
  }
  if (mode.tail == TailPolicy::kDrop) {
    EXPECT_EQ(repeats, 0) << "a resize must not hand out a sample twice";
    // Only the last layout's tail is dropped: less than one of its steps.
    EXPECT_LT(dropped, tail_bound) << "of " << n;
    if (mode.by_count) {
      EXPECT_LT(dropped, batch_sizes[2] * worlds[2]);
    }
  } else {
    EXPECT_EQ(dropped, 0) << "a resize must not skip a sample";
    EXPECT_LT(repeats, tail_bound);
  }
}

void SamplerSweep::check_epoch(const Mode& mode) const {
  const bool by_count = mode.by_count;
  const TailPolicy tail = mode.tail;
  std::vector<std::unique_ptr<BatchSampler>> ranks;
  for (int64_t r = 0; r < world(); ++r) {
    ranks.push_back(make(kind(), lengths_, options(r, mode)));
    ranks.back()->set_epoch(2);
  }
  std::vector<int64_t> count(lengths_.size(), 0);
  for (int64_t r = 0; r < world(); ++r) {
    EXPECT_EQ(ranks[r]->num_batches(), ranks[0]->num_batches()) << "rank " << r;
    EXPECT_GT(ranks[r]->num_batches(), 0);
    // The rank's own batches are column r of the shared plan.
    for (int64_t b = 0; b < ranks[r]->num_batches(); ++b) {
      EXPECT_EQ(ranks[r]->batches()[b], ranks[0]->steps()[b][r]);
      for (int64_t i : ranks[r]->batches()[b]) ++count[static_cast<size_t>(i)];
    }
  }
  EpochCoverage cov = ranks[0]->coverage();
  int64_t dropped = 0, repeats = 0;
  for (int64_t c : count) {
    if (c == 0) ++dropped;
    if (c > 1) repeats += c - 1;
  }
  EXPECT_EQ(dropped, static_cast<int64_t>(cov.dropped.size()));
  EXPECT_EQ(repeats, static_cast<int64_t>(cov.repeated.size()));
  if (tail == TailPolicy::kPadByRepeat) {
    EXPECT_EQ(dropped, 0) << "pad-by-repeat must cover every sample";
  } else {
    EXPECT_EQ(repeats, 0) << "drop must never repeat a sample";
  }
  if (by_count) {
    const int64_t step = 7 * world();
    const int64_t n = static_cast<int64_t>(lengths_.size());
    if (tail == TailPolicy::kDrop) {
      EXPECT_EQ(dropped, n % step);
    } else {
      EXPECT_EQ(repeats, (step - n % step) % step);
    }
    for (const auto& b : ranks[0]->batches()) EXPECT_EQ(b.size(), 7u);
  } else {
    // Token budget: no batch over max_tokens, counting padded tokens.
    for (const auto& step : ranks[0]->steps()) {
      for (const auto& b : step) {
        EXPECT_LE(static_cast<int64_t>(b.size()) * ranks[0]->padded_length(b), 600);
      }
    }
  }
}

void SamplerSweep::check_determinism(const Mode& mode) const {
  auto a = make(kind(), lengths_, options(0, mode));
  auto b = make(kind(), lengths_, options(0, mode));
  a->set_epoch(5);
  b->set_epoch(5);
  EXPECT_EQ(a->batches(), b->batches());
  b->set_epoch(6);
  EXPECT_NE(a->batches(), b->batches());
  SamplerOptions other = options(0, mode);
  other.seed = 12;
  auto c = make(kind(), lengths_, other);
  c->set_epoch(5);
  EXPECT_NE(a->batches(), c->batches());
}

void SamplerSweep::check_resume(const Mode& mode) const {
  auto full = make(kind(), lengths_, options(world() - 1, mode));
  full->set_epoch(3);
  std::vector<std::vector<int64_t>> expected;
  while (full->has_next()) expected.push_back(full->next());

  auto first = make(kind(), lengths_, options(world() - 1, mode));
  first->set_epoch(3);
  const int64_t half = first->num_batches() / 2;
  for (int64_t k = 0; k < half; ++k) first->next();
  const std::string saved = first->state().to_string();

  auto resumed = make(kind(), lengths_, options(world() - 1, mode));
  resumed->set_epoch(0);  // a fresh process starts somewhere else
  resumed->load_state(SamplerState::parse(saved));
  EXPECT_EQ(resumed->state(), first->state());
  std::vector<std::vector<int64_t>> rest;
  while (resumed->has_next()) rest.push_back(resumed->next());
  ASSERT_EQ(static_cast<int64_t>(rest.size()), static_cast<int64_t>(expected.size()) - half);
  EXPECT_TRUE(std::equal(rest.begin(), rest.end(), expected.begin() + half));
}

std::string sweep_name(const ::testing::TestParamInfo<Param>& info) {
  const Param& p = info.param;
  return std::string(std::get<0>(p) == Kind::kBucketed ? "Bucketed" : "Random") + "World" +
         std::to_string(std::get<1>(p));
}

INSTANTIATE_TEST_SUITE_P(Data, SamplerSweep,
                         ::testing::Combine(::testing::Values(Kind::kBucketed, Kind::kRandom),
                                            ::testing::Values<int64_t>(1, 2, 3, 8)),
                         sweep_name);

int64_t padded_tokens(const BatchSampler& s) {
  int64_t total = 0;
  for (const auto& step : s.steps()) {
    for (const auto& b : step) total += static_cast<int64_t>(b.size()) * s.padded_length(b);
  }
  return total;
}

TEST(LengthBucketedSampler, PadsFarLessThanRandomBatches) {
  auto lengths = skewed_lengths(5000);
  SamplerOptions o;
  o.batch_size = 24;
  o.max_length = 64;  // truncating the long tail, as a max length near p99 does
  LengthBucketedSampler bucketed(lengths, o);
  RandomBatchSampler random(lengths, o);
  bucketed.set_epoch(0);
  random.set_epoch(0);
  int64_t real = 0;
  for (int64_t len : lengths) real += std::min<int64_t>(len, 64);
  const double pad_bucketed = 1.0 - static_cast<double>(real) / padded_tokens(bucketed);
  const double pad_random = 1.0 - static_cast<double>(real) / padded_tokens(random);
  EXPECT_LT(pad_bucketed, 0.05);
  EXPECT_GT(pad_random, 0.4);
}

TEST(LengthBucketedSampler, LongestStepComesFirst) {
  auto lengths = skewed_lengths(2000);
  const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  for (int64_t world : {1, 4}) {
    SamplerOptions o;
    o.batch_size = 8;
    o.world_size = world;
    LengthBucketedSampler s(lengths, o);
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
      s.set_epoch(epoch);
      int64_t first = 0;
      for (const auto& b : s.steps()[0]) first = std::max(first, s.padded_length(b));
      EXPECT_EQ(first, longest) << "world " << world << " epoch " << epoch;
    }
  }
}

TEST(LengthBucketedSampler, RanksOfAStepGetSimilarLengths) {
  auto lengths = skewed_lengths(4000);
  SamplerOptions o;
  o.batch_size = 16;
  o.world_size = 4;
  LengthBucketedSampler s(lengths, o);
  RandomBatchSampler r(lengths, o);
  s.set_epoch(1);
  r.set_epoch(1);
  // Time of a step is the slowest rank's: sum over steps of max T minus mean T is the waiting.
  auto waiting = [](const BatchSampler& x) {
    double wait = 0;
    for (const auto& step : x.steps()) {
      double mx = 0, sum = 0;
      for (const auto& b : step) {
        const double t = static_cast<double>(x.padded_length(b));
        mx = std::max(mx, t);
        sum += t;
      }
      wait += mx - sum / static_cast<double>(step.size());
    }
    return wait / static_cast<double>(x.steps().size());
  };
  EXPECT_LT(waiting(s), 0.1 * waiting(r));
}

TEST(LengthBucketedSampler, SortedInsideMegaBatchesButShuffledAcrossThem) {
  // Lengths equal to the index: a global sort would put the batches in length order.
  std::vector<int64_t> lengths(960);
  std::iota(lengths.begin(), lengths.end(), 1);
  SamplerOptions o;
  o.batch_size = 4;
  o.mega_batch_mult = 10;
  LengthBucketedSampler s(lengths, o);
  s.set_epoch(0);
  for (const auto& b : s.batches()) {
    EXPECT_TRUE(std::is_sorted(b.begin(), b.end(), std::greater<int64_t>()));
  }
  // Within a batch lengths are close (from a sorted mega-batch of 40), never the whole range.
  int64_t spread = 0;
  for (const auto& b : s.batches()) spread = std::max(spread, b.front() - b.back());
  EXPECT_LT(spread, 400);
  std::vector<int64_t> firsts;
  for (const auto& b : s.batches()) firsts.push_back(b.front());
  EXPECT_FALSE(std::is_sorted(firsts.begin() + 1, firsts.end(), std::greater<int64_t>()));
}

TEST(BatchSampler, RejectsBadOptionsNamingTheProblem) {
  std::vector<int64_t> lengths = {5, 10, 500};
  SamplerOptions o;
  EXPECT_THROW(LengthBucketedSampler(lengths, o), zt::Error);  // neither size given
  o.max_tokens = 100;
  try {
    LengthBucketedSampler s(lengths, o);
    FAIL() << "a sample longer than the budget was accepted";
  } catch (const zt::Error& e) {
    EXPECT_NE(e.message().find("sample 2 has 500 tokens"), std::string::npos) << e.message();
  }
  o.max_length = 64;  // truncation makes it fit
  EXPECT_NO_THROW(LengthBucketedSampler(lengths, o));
  SamplerOptions bad_rank;
  bad_rank.batch_size = 1;
  bad_rank.rank = 2;
  bad_rank.world_size = 2;
  EXPECT_THROW(RandomBatchSampler(lengths, bad_rank), zt::Error);
}

TEST(SamplerState, RejectsAStateOfAnotherSampler) {
  auto lengths = skewed_lengths(100);
  SamplerOptions o;
  o.batch_size = 4;
  LengthBucketedSampler a(lengths, o);
  a.set_epoch(1);
  a.next();
  SamplerState st = a.state();
  o.batch_size = 5;
  LengthBucketedSampler other_options(lengths, o);
  EXPECT_THROW(other_options.load_state(st), zt::Error);
  o.batch_size = 4;
  o.seed = 9;
  LengthBucketedSampler other_seed(lengths, o);
  EXPECT_THROW(other_seed.load_state(st), zt::Error);
  EXPECT_THROW(SamplerState::parse("zt-sampler-state v1 seed=x"), zt::Error);
  EXPECT_THROW(SamplerState::parse("garbage"), zt::Error);
  EXPECT_EQ(SamplerState::parse(st.to_string()), st);
  // A state written before resizing existed (v1: no batch size, no history) still resumes.
  const std::string v1 = "zt-sampler-state v1 seed=0 epoch=1 next_batch=1 num_samples=100 " +
                         std::string("world_size=1 rank=0 fingerprint=") +
                         std::to_string(st.fingerprint);
  o.seed = 0;
  LengthBucketedSampler old(lengths, o);
  old.load_state(SamplerState::parse(v1));
  EXPECT_EQ(old.state(), st);
  EXPECT_THROW(SamplerState::parse(v1 + " history=-"), zt::Error);
  EXPECT_THROW(SamplerState::parse("zt-sampler-state v2 seed=0 epoch=1 next_batch=1 "
                                   "num_samples=100 world_size=2 rank=0 batch_size=4 "
                                   "history=2x4 fingerprint=1"),
               zt::Error);
}

TEST(BatchSampler, NextBeforeSetEpochAndPastTheEndThrow) {
  SamplerOptions o;
  o.batch_size = 2;
  RandomBatchSampler s({1, 2, 3, 4}, o);
  EXPECT_THROW(s.next(), zt::Error);
  s.set_epoch(0);
  s.next();
  s.next();
  EXPECT_FALSE(s.has_next());
  EXPECT_THROW(s.next(), zt::Error);
}

}  // namespace
}  // namespace zt::data
