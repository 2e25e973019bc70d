#include "data/text_reader.h"

#include <fstream>

#include <gtest/gtest.h>

#include "base/error.h"
#include "data/length_stats.h"

namespace zt::data {
namespace {

std::string write_temp(const std::string& name, const std::string& text) {
  std::string path = ::testing::TempDir() + "zt_text_" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(TextReader, LinesSkipEmptyOnes) {
  auto p = write_temp("lines.txt", "first line\n\nsecond line\r\n");
  TextCorpus c = read_text_files({p}, {});
  EXPECT_EQ(c.texts, (std::vector<std::string>{"first line", "second line"}));
}

TEST(TextReader, FortuneEntriesJoinTheirLines) {
  auto p = write_temp("fortune", "A short one.\n%\nA long\n   story here.\n%\n%\nLast\n");
  TextReaderOptions o;
  o.format = TextFormat::kFortune;
  TextCorpus c = read_text_files({p, p}, o);
  EXPECT_EQ(c.texts, (std::vector<std::string>{"A short one.", "A long story here.", "Last",
                                               "A short one.", "A long story here.", "Last"}));
}

TEST(TextReader, JsonlTextAndLabels) {
  auto p =
      write_temp("a.jsonl",
                 "{\"text\": \"caf\\u00e9 \\\"ok\\\"\", \"label\": \"pos\", \"score\": 3, "
                 "\"extra\": {\"a\": [1, \"]\"]}}\n"
                 "\n"
                 "{\"score\": -2, \"label\": \"neg\", \"text\": \"bad\\nline\", \"x\": null}\n");
  TextReaderOptions o;
  o.format = TextFormat::kJsonl;
  o.label_fields = {"label", "score"};
  TextCorpus c = read_text_files({p}, o);
  ASSERT_EQ(c.texts.size(), 2u);
  EXPECT_EQ(c.texts[0], "caf\xc3\xa9 \"ok\"");
  EXPECT_EQ(c.texts[1], "bad\nline");
  EXPECT_EQ(c.labels[0], (std::vector<int64_t>{1, 3}));  // "neg" = 0, "pos" = 1 (sorted)
  EXPECT_EQ(c.labels[1], (std::vector<int64_t>{0, -2}));
  EXPECT_EQ(c.label_vocab.at("label"), (std::vector<std::string>{"neg", "pos"}));
}

TEST(TextReader, JsonlErrorsNameFileAndLine) {
  auto p = write_temp("bad.jsonl", "{\"text\": \"ok\", \"label\": 1}\n{\"text\": \"x\"}\n");
  TextReaderOptions o;
  o.format = TextFormat::kJsonl;
  o.label_fields = {"label"};
  try {
    read_text_files({p}, o);
    FAIL();
  } catch (const zt::Error& e) {
    EXPECT_NE(e.message().find(p + ":2: label field 'label' is missing"), std::string::npos)
        << e.message();
  }
  auto q = write_temp("broken.jsonl", "{\"text\": \"ok\"\n");
  o.label_fields = {};
  EXPECT_THROW(read_text_files({q}, o), zt::Error);
  EXPECT_THROW(read_text_files({p + ".missing"}, o), zt::Error);
  EXPECT_THROW(parse_text_format("csv"), zt::Error);
}

TEST(LengthStats, NearestRankPercentiles) {
  std::vector<int64_t> v;
  for (int64_t i = 100; i >= 1; --i) v.push_back(i);
  LengthStats s = summarize_lengths(v);
  EXPECT_EQ(s.min, 1);
  EXPECT_EQ(s.p50, 50);
  EXPECT_EQ(s.p99, 99);
  EXPECT_EQ(s.max, 100);
  EXPECT_DOUBLE_EQ(s.mean, 50.5);
}

}  // namespace
}  // namespace zt::data
