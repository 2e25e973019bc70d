#include "data/loader.h"

#include <atomic>
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "base/error.h"

namespace zt::data {
namespace {

// Sample i is (i % 50 + 1) tokens, all equal to i; optionally fails on one sample or sleeps.
class FakeSource : public SampleSource {
 public:
  explicit FakeSource(int64_t n, int64_t fail_on = -1, int sleep_us = 0)
      : n_(n), fail_on_(fail_on), sleep_us_(sleep_us) {}
  int64_t size() const override { return n_; }
  int64_t length(int64_t i) const override { return i % 50 + 1; }
  void read_tokens(int64_t i, std::vector<int64_t>* out) const override {
    ++reads;
    if (sleep_us_) std::this_thread::sleep_for(std::chrono::microseconds(sleep_us_));
    ZT_CHECK(i != fail_on_, "sample ", i, " is unreadable");
    out->assign(static_cast<size_t>(length(i)), i);
  }
  mutable std::atomic<int64_t> reads{0};

 private:
  int64_t n_, fail_on_;
  int sleep_us_;
};

SamplerOptions opts() {
  SamplerOptions o;
  o.batch_size = 8;
  o.seed = 5;
  return o;
}

std::vector<std::vector<int64_t>> drain(Loader& loader) {
  std::vector<std::vector<int64_t>> out;
  while (auto b = loader.next()) {
    at::Tensor ix = b->indices;
    out.emplace_back(ix.data_ptr<int64_t>(), ix.data_ptr<int64_t>() + ix.numel());
    // The row is the sample: every real token equals the index.
    EXPECT_EQ(b->input_ids[0][0].item<int64_t>(), out.back()[0]);
  }
  return out;
}

TEST(Loader, DeliversTheSamplerOrderWhateverTheWorkerCount) {
  FakeSource src(1000);
  LengthBucketedSampler reference(src.lengths(), opts());
  reference.set_epoch(1);
  for (int workers : {0, 1, 4}) {
    LengthBucketedSampler s(src.lengths(), opts());
    Loader loader(src, s, Collator({.pad_to_multiple = 8}), {.num_workers = workers});
    loader.set_epoch(1);
    EXPECT_EQ(drain(loader), reference.batches()) << workers << " workers";
    EXPECT_FALSE(loader.next().has_value());
  }
}

// An evaluation loader (ignore_repeats): the rows of the tail's repeats are marked and carry the
// ignore index as every label, so a token-level loss counts each sample once; a training loader
// marks them and trains on them.
TEST(Loader, ValidationRowsOfTheTailsRepeatsAreMarkedAndIgnored) {
  FakeSource src(1001);  // 125 batches of 8 and one of 1 + 7 repeats
  for (bool ignore : {true, false}) {
    LengthBucketedSampler s(src.lengths(), opts());
    Loader loader(src, s, Collator({.pad_to_multiple = 8}),
                  {.num_workers = 1, .ignore_repeats = ignore});
    loader.set_epoch(0);
    int64_t marked = 0, ignored_rows = 0, batches = 0;
    while (auto b = loader.next()) {
      const std::vector<int64_t>& repeats = s.repeated_slots(batches++);
      if (repeats.empty()) {
        EXPECT_FALSE(b->repeated.defined());
        continue;
      }
      ASSERT_TRUE(b->repeated.defined());
      marked += b->repeated.sum().item<int64_t>();
      for (int64_t slot : repeats) EXPECT_TRUE(b->repeated[slot].item<bool>());
      for (int64_t row = 0; row < b->batch_size(); ++row) {
        ignored_rows += b->labels[row].eq(-100).all().item<bool>() ? 1 : 0;
      }
      EXPECT_EQ(b->without_repeats(b->indices).numel(),
                b->batch_size() - static_cast<int64_t>(repeats.size()));
    }
    EXPECT_EQ(marked, 7);
    EXPECT_EQ(ignored_rows, ignore ? 7 : 0) << "ignore_repeats " << ignore;
  }
}

TEST(Loader, PrefetchIsBounded) {
  FakeSource src(1000);
  LengthBucketedSampler s(src.lengths(), opts());
  Loader loader(src, s, Collator(), {.num_workers = 2, .prefetch_batches = 3});
  loader.set_epoch(0);
  ASSERT_TRUE(loader.next().has_value());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // One batch consumed + at most 3 ahead, 8 samples each.
  EXPECT_LE(src.reads.load(), (1 + 3) * 8);
  EXPECT_GE(src.reads.load(), 2 * 8);
}

TEST(Loader, StateIsTheConsumerPositionAndResumesExactly) {
  FakeSource src(600);
  LengthBucketedSampler s1(src.lengths(), opts());
  Loader a(src, s1, Collator(), {.num_workers = 3});
  a.set_epoch(2);
  std::vector<std::vector<int64_t>> full;
  for (int k = 0; k < 10; ++k) {
    at::Tensor ix = a.next()->indices;
    full.emplace_back(ix.data_ptr<int64_t>(), ix.data_ptr<int64_t>() + ix.numel());
  }
  SamplerState st = a.state();
  EXPECT_EQ(st.next_batch, 10);  // not the prefetch position
  for (auto& b : drain(a)) full.push_back(b);

  LengthBucketedSampler s2(src.lengths(), opts());
  Loader b(src, s2, Collator(), {.num_workers = 2});
  b.load_state(st);
  auto rest = drain(b);
  ASSERT_EQ(rest.size() + 10, full.size());
  EXPECT_TRUE(std::equal(rest.begin(), rest.end(), full.begin() + 10));
}

TEST(Loader, WorkerErrorSurfacesInTheConsumerNamingTheBatch) {
  FakeSource src(400, /*fail_on=*/123);
  LengthBucketedSampler s(src.lengths(), opts());
  Loader loader(src, s, Collator(), {.num_workers = 2});
  loader.set_epoch(0);
  int64_t fail_batch = -1;
  for (int64_t j = 0; j < s.num_batches(); ++j) {
    const auto& b = s.batches()[static_cast<size_t>(j)];
    if (std::find(b.begin(), b.end(), 123) != b.end()) fail_batch = j;
  }
  ASSERT_GE(fail_batch, 0);
  int64_t good = 0;
  try {
    while (loader.next()) ++good;
    FAIL() << "the failing sample was not reported";
  } catch (const zt::Error& e) {
    EXPECT_EQ(good, fail_batch);
    EXPECT_NE(e.message().find("batch " + std::to_string(fail_batch)), std::string::npos)
        << e.message();
    EXPECT_NE(e.message().find("sample 123 is unreadable"), std::string::npos) << e.message();
  }
  EXPECT_THROW(loader.next(), zt::Error);  // stays failed
}

TEST(Loader, ShutsDownCleanlyMidEpoch) {
  FakeSource src(5000, -1, /*sleep_us=*/200);
  LengthBucketedSampler s(src.lengths(), opts());
  int64_t reads_at_destruction = 0;
  {
    Loader loader(src, s, Collator(), {.num_workers = 4, .prefetch_batches = 16});
    loader.set_epoch(0);
    ASSERT_TRUE(loader.next().has_value());
    reads_at_destruction = src.reads.load();
  }  // destructor joins the workers while they are busy
  // The workers stopped: they read at most what the prefetch window allowed (16 batches of 8
  // plus the batch each of the 4 workers had started), not the epoch, and nothing after the join.
  const int64_t after_join = src.reads.load();
  EXPECT_LE(after_join - reads_at_destruction, (16 + 4) * 8) << "workers kept reading";
  EXPECT_LT(after_join, src.size() / 4) << "the destructor waited for the whole epoch";
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(src.reads.load(), after_join) << "a worker is still running after the destructor";
}

TEST(Loader, PinMemoryIsSkippedWithoutCuda) {
  FakeSource src(64);
  LengthBucketedSampler s(src.lengths(), opts());
  Loader loader(src, s, Collator(), {.num_workers = 1, .pin_memory = true});
  loader.set_epoch(0);
  auto b = loader.next();
  ASSERT_TRUE(b.has_value());
  if (!at::hasCUDA()) {
    EXPECT_FALSE(b->input_ids.is_pinned());
  }
}

}  // namespace
}  // namespace zt::data
