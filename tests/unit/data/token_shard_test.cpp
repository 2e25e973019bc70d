#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "base/error.h"
#include "data/token_dataset.h"
#include "data/token_shard_writer.h"
#include "data/tokenizer.h"
#include "test_corpus.h"

namespace zt::data {
namespace {

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "zt_shard_" + name + ".ztt";
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Writes a small shard with labels and returns its path.
std::string small_shard(const std::string& name, uint32_t vocab = 1000) {
  TokenShardWriter w({vocab, 42, {"label", "source"}});
  w.add({5, 6, 7}, {1, 10});
  w.add({}, {0, 11});
  w.add({static_cast<int>(vocab) - 1, 0}, {2, 12});
  w.set_meta("pad_id", "0");
  w.set_meta("note", "unit test");
  std::string path = temp_path(name);
  w.write(path);
  return path;
}

// Expects opening `path` to throw a zt::Error whose message names the file and contains `what`.
void expect_open_error(const std::string& path, const std::string& what) {
  try {
    TokenDataset ds(path);
    FAIL() << "opened a bad shard: " << path;
  } catch (const zt::Error& e) {
    EXPECT_NE(e.message().find(path), std::string::npos) << e.message();
    EXPECT_NE(e.message().find(what), std::string::npos) << e.message();
  }
}

TEST(TokenShard, RoundTripEqualsTokenizerOutput) {
  auto sentences = testing::synthetic_sentences(400);
  TokenizerTrainOptions topt;
  topt.vocab_size = 120;
  Tokenizer tok = Tokenizer::train(sentences, topt);
  TokenShardWriter w({static_cast<uint32_t>(tok.vocab_size()), tok.id(), {}});
  w.set_meta("pad_id", std::to_string(tok.pad_id()));
  std::vector<std::vector<int>> expected;
  for (const auto& s : sentences) {
    expected.push_back(tok.encode(s, {.add_bos = false, .add_eos = true}));
    w.add(expected.back());
  }
  const std::string path = temp_path("roundtrip");
  w.write(path);

  TokenDataset ds(path);
  ASSERT_EQ(ds.size(), static_cast<int64_t>(sentences.size()));
  EXPECT_EQ(ds.tokenizer_id(), tok.id());
  EXPECT_EQ(ds.header().token_bytes, 2u);
  int64_t total = 0;
  for (int64_t i = 0; i < ds.size(); ++i) {
    const auto& e = expected[static_cast<size_t>(i)];
    ASSERT_EQ(ds.length(i), static_cast<int64_t>(e.size()));
    TokenSpan span = ds.tokens(i);
    for (int64_t k = 0; k < span.size(); ++k) ASSERT_EQ(span[k], e[static_cast<size_t>(k)]);
    at::Tensor t = ds.tensor(i);
    EXPECT_EQ(t.dtype(), at::kLong);
    EXPECT_EQ(t.numel(), static_cast<int64_t>(e.size()));
    total += ds.length(i);
    // Decoding the stored ids gives the text back (the normalizer keeps this ASCII as is).
    std::vector<int> body(e.begin(), e.end() - 1);
    EXPECT_EQ(tok.decode(body), sentences[static_cast<size_t>(i)]);
  }
  EXPECT_EQ(ds.num_tokens(), total);
  EXPECT_EQ(ds.pad_id(), tok.pad_id());
}

TEST(TokenShard, LabelsMetaAndWideTokens) {
  const std::string path16 = small_shard("labels16");
  TokenDataset ds(path16);
  ASSERT_EQ(ds.size(), 3);
  EXPECT_EQ(ds.length(1), 0);
  EXPECT_EQ(ds.num_label_fields(), 2);
  EXPECT_EQ(ds.label_fields(), (std::vector<std::string>{"label", "source"}));
  EXPECT_EQ(ds.labels(2)[0], 2);
  EXPECT_EQ(ds.labels(2)[1], 12);
  EXPECT_EQ(ds.meta_value("note"), "unit test");
  EXPECT_EQ(ds.tokens(2)[0], 999);

  // A vocabulary past 65536 ids switches to uint32 tokens.
  const std::string path32 = small_shard("labels32", 70000);
  TokenDataset wide(path32);
  EXPECT_EQ(wide.header().token_bytes, 4u);
  EXPECT_EQ(wide.tokens(2)[0], 69999);
  EXPECT_GT(std::remove(path32.c_str()) + 1, 0);
}

TEST(TokenShard, WriterRejectsOutOfVocabularyAndLabelCount) {
  TokenShardWriter w({100, 0, {"label"}});
  EXPECT_THROW(w.add({100}, {0}), zt::Error);
  EXPECT_THROW(w.add({-1}, {0}), zt::Error);
  EXPECT_THROW(w.add({1}, {}), zt::Error);
}

TEST(TokenShard, MissingAndEmptyFile) {
  expect_open_error(temp_path("does_not_exist"), "cannot open");
  const std::string empty = temp_path("empty");
  write_file(empty, "");
  expect_open_error(empty, "shorter than the 128-byte header");
}

TEST(TokenShard, ForeignFile) {
  const std::string path = temp_path("foreign");
  write_file(path, std::string(4096, 'x'));
  expect_open_error(path, "header magic is not ZTTOKENS");
}

TEST(TokenShard, WrongVersion) {
  const std::string path = small_shard("version");
  std::string bytes = read_file(path);
  const uint32_t v = 99;
  std::memcpy(&bytes[8], &v, 4);
  write_file(path, bytes);
  expect_open_error(path, "format version 99");
}

TEST(TokenShard, Truncated) {
  const std::string path = small_shard("truncated");
  std::string bytes = read_file(path);
  write_file(path, bytes.substr(0, bytes.size() - 3));
  expect_open_error(path, "truncated copy?");
}

TEST(TokenShard, TrailingGarbage) {
  const std::string path = small_shard("trailing");
  write_file(path, read_file(path) + "junk");
  expect_open_error(path, "trailing garbage?");
}

TEST(TokenShard, FlippedTokenFailsChecksum) {
  const std::string path = small_shard("flipped");
  std::string bytes = read_file(path);
  bytes[bytes.size() - 1] ^= 0x01;
  write_file(path, bytes);
  expect_open_error(path, "checksum mismatch");
  // Without verification the header still opens: the check is what catches it.
  EXPECT_NO_THROW(TokenDataset(path, {.verify_checksum = false}));
}

TEST(TokenShard, CorruptIndexIsCaughtWithoutChecksum) {
  const std::string path = small_shard("index");
  std::string bytes = read_file(path);
  ShardHeader h;
  std::memcpy(&h, bytes.data(), sizeof(h));
  const int64_t bad = 2;  // offsets[2] = 2 < offsets[1] = 3
  std::memcpy(&bytes[h.offsets_offset + 2 * 8], &bad, 8);
  write_file(path, bytes);
  try {
    TokenDataset ds(path, {.verify_checksum = false});
    FAIL() << "opened a shard with decreasing offsets";
  } catch (const zt::Error& e) {
    EXPECT_NE(e.message().find("offsets decrease at sample 1"), std::string::npos) << e.message();
  }
}

TEST(TokenShard, BadSectionOffsets) {
  const std::string path = small_shard("sections");
  std::string bytes = read_file(path);
  ShardHeader h;
  std::memcpy(&h, bytes.data(), sizeof(h));
  h.tokens_offset += 64;
  std::memcpy(bytes.data(), &h, sizeof(h));
  write_file(path, bytes);
  expect_open_error(path, "section offsets");
}

// A one-sample shard over a 100-id vocabulary whose meta holds `meta` ("key=value" pairs).
std::string shard_with_meta(const std::string& name,
                            const std::vector<std::pair<std::string, std::string>>& meta) {
  TokenShardWriter w({100, 0, {}});
  w.add({5, 6, 7});
  for (const auto& [k, v] : meta) w.set_meta(k, v);
  const std::string path = temp_path(name);
  w.write(path);
  return path;
}

// Expects pad_id() of the shard at `path` to throw a zt::Error naming the file and `what`.
void expect_pad_id_error(const std::string& path, const std::string& what) {
  TokenDataset ds(path);
  try {
    const int64_t id = ds.pad_id();
    FAIL() << "pad_id() of " << path << " gave " << id;
  } catch (const zt::Error& e) {
    EXPECT_NE(e.message().find(path), std::string::npos) << e.message();
    EXPECT_NE(e.message().find(what), std::string::npos) << e.message();
  }
}

TEST(TokenShard, PadIdComesFromTheMeta) {
  TokenDataset ds(shard_with_meta("pad3", {{"pad_id", "3"}, {"eos_id", "2"}}));
  EXPECT_EQ(ds.pad_id(), 3);
}

TEST(TokenShard, PadIdMinusOneFallsBackToEos) {
  TokenDataset ds(shard_with_meta("pad_eos", {{"pad_id", "-1"}, {"eos_id", "2"}}));
  EXPECT_EQ(ds.pad_id(), 2);
}

TEST(TokenShard, PadIdErrorsNameTheFile) {
  expect_pad_id_error(shard_with_meta("pad_missing", {{"eos_id", "2"}}), "no pad_id");
  expect_pad_id_error(shard_with_meta("pad_word", {{"pad_id", "three"}}), "not an integer");
  expect_pad_id_error(shard_with_meta("pad_no_eos", {{"pad_id", "-1"}, {"eos_id", "-1"}}),
                      "set a pad piece");
  expect_pad_id_error(shard_with_meta("pad_big", {{"pad_id", "100"}}), "outside the vocabulary");
}

TEST(TokenShard, IndexOutOfRange) {
  TokenDataset ds(small_shard("range"));
  EXPECT_THROW(ds.tokens(3), zt::Error);
  EXPECT_THROW(ds.length(-1), zt::Error);
}

}  // namespace
}  // namespace zt::data
