#include "data/collator.h"

#include <gtest/gtest.h>

#include "base/error.h"

namespace zt::data {
namespace {

std::vector<int64_t> row(const at::Tensor& t, int64_t b) {
  at::Tensor r = t[b].contiguous();
  return std::vector<int64_t>(r.data_ptr<int64_t>(), r.data_ptr<int64_t>() + r.numel());
}

TEST(Collator, PadsToTheLongestSampleWithMaskAndIgnoredLabels) {
  Collator c;
  Batch b = c.collate({{5, 6, 7}, {8}, {9, 10}}, {}, {40, 41, 42});
  ASSERT_EQ(b.input_ids.sizes(), (at::IntArrayRef{3, 3}));
  EXPECT_EQ(b.input_ids.dtype(), at::kLong);
  EXPECT_EQ(row(b.input_ids, 1), (std::vector<int64_t>{8, 0, 0}));
  EXPECT_EQ(row(b.attention_mask, 1), (std::vector<int64_t>{1, 0, 0}));
  EXPECT_EQ(row(b.labels, 1), (std::vector<int64_t>{8, -100, -100}));
  EXPECT_EQ(row(b.labels, 0), (std::vector<int64_t>{5, 6, 7}));
  EXPECT_TRUE(b.indices.equal(at::tensor(std::vector<int64_t>{40, 41, 42})));
  EXPECT_EQ(b.num_tokens, 6);
  EXPECT_EQ(b.num_padded_tokens, 9);
  EXPECT_NEAR(b.padding_fraction(), 3.0 / 9.0, 1e-12);
  EXPECT_EQ(b.attention_mask.sum().item<int64_t>(), b.num_tokens);
  EXPECT_FALSE(b.sample_labels.defined());
}

TEST(Collator, PadToMultipleAndPadId) {
  Collator c({.pad_id = 3, .pad_to_multiple = 8});
  Batch b = c.collate({{1, 2, 3, 4, 5, 6, 7, 8, 9}, {1}});
  ASSERT_EQ(b.input_ids.size(1), 16);
  EXPECT_EQ(b.input_ids[1][15].item<int64_t>(), 3);
  EXPECT_EQ(b.attention_mask[0].sum().item<int64_t>(), 9);
  EXPECT_EQ(b.num_padded_tokens, 32);
}

TEST(Collator, TruncatesToMaxLengthEvenWhenNotAMultiple) {
  Collator c({.pad_to_multiple = 8, .max_length = 5});
  Batch b = c.collate({{1, 2, 3, 4, 5, 6, 7}, {1, 2}});
  ASSERT_EQ(b.input_ids.size(1), 5);
  EXPECT_EQ(row(b.input_ids, 0), (std::vector<int64_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(b.num_tokens, 7);
}

TEST(Collator, CausalShiftPredictsTheNextToken) {
  Collator c({.max_length = 3, .causal_lm_shift = true});
  Batch b = c.collate({{10, 11, 12, 13, 14}, {20, 21}, {30}});
  ASSERT_EQ(b.input_ids.size(1), 3);  // 5 tokens -> 4 inputs -> truncated to 3
  EXPECT_EQ(row(b.input_ids, 0), (std::vector<int64_t>{10, 11, 12}));
  EXPECT_EQ(row(b.labels, 0), (std::vector<int64_t>{11, 12, 13}));
  EXPECT_EQ(row(b.input_ids, 1), (std::vector<int64_t>{20, 0, 0}));
  EXPECT_EQ(row(b.labels, 1), (std::vector<int64_t>{21, -100, -100}));
  // A one-token sample has no target: an all-pad row, ignored by the loss.
  EXPECT_EQ(row(b.attention_mask, 2), (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(row(b.labels, 2), (std::vector<int64_t>{-100, -100, -100}));
  EXPECT_EQ(b.num_tokens, 4);
}

TEST(Collator, SampleLabels) {
  Collator c;
  Batch b = c.collate({{1}, {2, 3}}, {{7, 1}, {8, 0}});
  ASSERT_TRUE(b.sample_labels.defined());
  EXPECT_EQ(b.sample_labels.sizes(), (at::IntArrayRef{2, 2}));
  EXPECT_EQ(row(b.sample_labels, 1), (std::vector<int64_t>{8, 0}));
  EXPECT_THROW(c.collate({{1}, {2}}, {{1}}), zt::Error);
  EXPECT_THROW(c.collate({}), zt::Error);
}

}  // namespace
}  // namespace zt::data
