#include "data/tokenizer.h"

#include <set>

#include <gtest/gtest.h>

#include "base/error.h"
#include "data/text_dataset.h"
#include "test_corpus.h"

namespace zt::data {
namespace {

const Tokenizer& unigram() {
  static Tokenizer tok = [] {
    TokenizerTrainOptions o;
    o.vocab_size = 150;
    o.model_type = "unigram";
    return Tokenizer::train(testing::synthetic_sentences(500), o);
  }();
  return tok;
}

TEST(Tokenizer, SpecialIdsAndDeterministicTraining) {
  const Tokenizer& tok = unigram();
  EXPECT_EQ(tok.pad_id(), 0);
  EXPECT_EQ(tok.unk_id(), 1);
  EXPECT_EQ(tok.bos_id(), 2);
  EXPECT_EQ(tok.eos_id(), 3);
  auto ids = tok.encode("the lord said", {.add_bos = true, .add_eos = true});
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids.front(), 2);
  EXPECT_EQ(ids.back(), 3);
  for (size_t k = 1; k + 1 < ids.size(); ++k) EXPECT_GT(ids[k], 3);
  // Same sentences and options: same model, same id.
  TokenizerTrainOptions o;
  o.vocab_size = 150;
  o.model_type = "unigram";
  EXPECT_EQ(Tokenizer::train(testing::synthetic_sentences(500), o).id(), tok.id());
}

TEST(Tokenizer, TrainingSampleChangesModelAndSaveLoadKeepsIt) {
  TokenizerTrainOptions o;
  o.vocab_size = 100;
  o.max_sentences = 50;
  Tokenizer a = Tokenizer::train(testing::synthetic_sentences(500), o);
  const std::string path = ::testing::TempDir() + "zt_tok.model";
  a.save(path);
  Tokenizer b = Tokenizer::load(path);
  EXPECT_EQ(a.id(), b.id());
  EXPECT_EQ(a.encode("moses went into the land"), b.encode("moses went into the land"));
  EXPECT_THROW(Tokenizer::load(path + ".missing"), zt::Error);
}

TEST(Tokenizer, SamplingDrawsDifferentSegmentations) {
  const Tokenizer& tok = unigram();
  Tokenizer::set_sampling_seed(7);
  const std::string text = "the spirit of the lord moved upon the face of the waters";
  const auto best = tok.encode(text);
  std::set<std::vector<int>> seen;
  for (int k = 0; k < 30; ++k) {
    auto ids = tok.encode(text, {.enable_sampling = true, .alpha = 0.1f, .nbest_size = -1});
    EXPECT_EQ(tok.decode(ids), text);  // every segmentation spells the same text
    seen.insert(ids);
  }
  EXPECT_GT(seen.size(), 3u);
  EXPECT_EQ(tok.encode(text), best);  // without sampling: always the best
}

TEST(Tokenizer, BpeSamplingIsDropout) {
  TokenizerTrainOptions o;
  o.vocab_size = 150;
  o.model_type = "bpe";
  Tokenizer bpe = Tokenizer::train(testing::synthetic_sentences(500), o);
  Tokenizer::set_sampling_seed(3);
  const std::string text = "the people of israel went into the land";
  const auto best = bpe.encode(text);
  std::set<std::vector<int>> seen;
  for (int k = 0; k < 20; ++k) {
    auto ids = bpe.encode(text, {.enable_sampling = true, .alpha = 0.3f});
    EXPECT_EQ(bpe.decode(ids), text);
    EXPECT_GE(ids.size(), best.size());  // dropped merges only ever split pieces
    seen.insert(ids);
  }
  EXPECT_GT(seen.size(), 3u);
}

TEST(TextDataset, OnTheFlySamplingKeepsStableLengthsForTheSampler) {
  auto tok = std::make_shared<Tokenizer>(Tokenizer::from_serialized(unigram().serialized()));
  TextDataset ds({"the lord said unto moses", "behold the light"}, tok,
                 {.add_eos = true, .enable_sampling = true, .alpha = 0.1f}, {{1}, {0}});
  EXPECT_EQ(ds.length(0), static_cast<int64_t>(tok->encode("the lord said unto moses").size()) + 1);
  EXPECT_EQ(ds.num_label_fields(), 1);
  std::set<std::vector<int64_t>> seen;
  std::vector<int64_t> out;
  for (int k = 0; k < 20; ++k) {
    ds.read_tokens(0, &out);
    EXPECT_EQ(out.back(), tok->eos_id());
    seen.insert(out);
  }
  EXPECT_GT(seen.size(), 1u);
}

}  // namespace
}  // namespace zt::data
