// FlatLayout and bucket planning: the memory layout every ZeRO stage relies on.

#include "core/zero/flat_buffer.h"

#include <numeric>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "base/error.h"

namespace zt::dist {
namespace {

std::vector<std::pair<std::string, at::Tensor>> named(const std::vector<int64_t>& sizes) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (size_t i = 0; i < sizes.size(); ++i) {
    out.emplace_back("p" + std::to_string(i),
                     torch::arange(sizes[i], torch::kFloat).add_(100.0 * static_cast<double>(i)));
  }
  return out;
}

TEST(FlatLayout, PadsToAMultipleOfTheWorldAndSplitsIntoEqualShards) {
  for (int world : {1, 2, 3, 4, 7}) {
    FlatLayout l(named({3, 5, 2}), world);  // 10 elements
    EXPECT_EQ(l.numel(), 10);
    EXPECT_EQ(l.padded_numel() % world, 0) << world;
    EXPECT_GE(l.padded_numel(), 10);
    EXPECT_LT(l.padded_numel() - 10, world) << "at most world-1 padding elements";
    EXPECT_EQ(l.shard_numel() * world, l.padded_numel());
    int64_t next = 0;
    for (int r = 0; r < world; ++r) {
      const Range own = l.shard_range(r);
      EXPECT_EQ(own.begin, next) << "rank " << r << " of " << world;
      EXPECT_EQ(own.size(), l.shard_numel());
      next = own.end;
    }
    EXPECT_EQ(next, l.padded_numel());
  }
}

TEST(FlatLayout, EntriesAreBackToBackInGivenOrder) {
  FlatLayout l(named({3, 5, 1, 2}), 3);
  const std::vector<int64_t> begins = {0, 3, 8, 9};
  ASSERT_EQ(l.entries().size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(l.entries()[i].name, "p" + std::to_string(i));
    EXPECT_EQ(l.entries()[i].range.begin, begins[i]);
    EXPECT_EQ(l.entries()[i].range.size(), l.entries()[i].param.numel());
  }
  EXPECT_EQ(l.padded_numel(), 12);
  // Rank 1 of 3 owns [4, 8): the tail of p1 only.
  EXPECT_EQ(intersect(l.entries()[1].range, l.shard_range(1)).size(), 4);
  EXPECT_TRUE(intersect(l.entries()[0].range, l.shard_range(1)).empty());
  // Rank 2 owns [8, 12): p2, p3 and one padding element.
  EXPECT_EQ(intersect(l.entries()[2].range, l.shard_range(2)).size(), 1);
  EXPECT_EQ(intersect(l.entries()[3].range, l.shard_range(2)).size(), 2);
}

TEST(FlatLayout, OneElementParametersAcrossMoreRanksThanElements) {
  FlatLayout l(named({1, 1, 1}), 4);
  EXPECT_EQ(l.padded_numel(), 4);
  EXPECT_EQ(l.shard_numel(), 1);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(intersect(l.entries()[r].range, l.shard_range(r)).size(), 1) << r;
  }
  for (const auto& e : l.entries()) EXPECT_TRUE(intersect(e.range, l.shard_range(3)).empty());
}

TEST(FlatLayout, BindMakesParametersViewsOfTheFlatBufferAndKeepsValues) {
  auto params = named({3, 5, 2});
  std::vector<at::Tensor> before;
  std::vector<const void*> impls;
  for (auto& p : params) {
    before.push_back(p.second.clone());
    impls.push_back(p.second.unsafeGetTensorImpl());
  }
  FlatLayout l(params, 4);
  at::Tensor flat = torch::full({l.padded_numel()}, -7.0f);
  l.bind_parameters(flat);
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& e = l.entries()[i];
    EXPECT_EQ(e.param.unsafeGetTensorImpl(), impls[i]) << "the parameter keeps its TensorImpl";
    EXPECT_TRUE(torch::equal(e.param, before[i])) << e.name;
    EXPECT_TRUE(torch::equal(flat.narrow(0, e.range.begin, e.range.size()), before[i]));
  }
  EXPECT_TRUE(torch::equal(flat.narrow(0, 10, 2), torch::zeros({2}))) << "padding is zeroed";
  flat.fill_(3.0f);  // writes through to every parameter
  for (const auto& e : l.entries()) EXPECT_TRUE(torch::all(e.param == 3.0f).item<bool>());
}

TEST(PlanBuckets, CutsConsecutiveGroupsUnderTheLimit) {
  auto sizes_of = [](const std::vector<int64_t>& numels, int64_t limit) {
    std::vector<at::Tensor> t;
    for (int64_t n : numels) t.push_back(torch::empty({n}));
    return plan_buckets(t, limit);
  };
  EXPECT_EQ(sizes_of({4, 4, 4}, 10), (std::vector<size_t>{2, 1}));
  EXPECT_EQ(sizes_of({5, 5, 5, 5}, 10), (std::vector<size_t>{2, 2})) << "exactly full";
  EXPECT_EQ(sizes_of({3, 20, 3}, 10), (std::vector<size_t>{1, 1, 1})) << "oversized alone";
  EXPECT_EQ(sizes_of({1, 1, 1, 1, 1}, 2), (std::vector<size_t>{2, 2, 1}));
  EXPECT_EQ(sizes_of({7}, 1'000'000), (std::vector<size_t>{1}));
  EXPECT_TRUE(sizes_of({}, 10).empty());
  std::vector<int64_t> many(1000, 3);
  auto cut = sizes_of(many, 30);
  EXPECT_EQ(cut.size(), 100u);
  EXPECT_EQ(std::accumulate(cut.begin(), cut.end(), size_t{0}), 1000u);
  EXPECT_THROW(sizes_of({1}, 0), zt::Error);
}

}  // namespace
}  // namespace zt::dist
