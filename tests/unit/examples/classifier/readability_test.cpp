// Flesch-Kincaid counting of the classifier example: words, sentences and syllables of small
// texts against counts made by hand, and the grade formula.

#include "examples/classifier/readability.h"

#include <gtest/gtest.h>

#include "base/error.h"

namespace zt::examples {
namespace {

TEST(Readability, SyllablesByVowelGroups) {
  EXPECT_EQ(count_syllables("cat"), 1);
  EXPECT_EQ(count_syllables("make"), 1);   // silent final e
  EXPECT_EQ(count_syllables("table"), 2);  // "-le" keeps its syllable
  EXPECT_EQ(count_syllables("be"), 1);
  EXPECT_EQ(count_syllables("beautiful"), 3);  // eau-ti-ful
  EXPECT_EQ(count_syllables("rhythm"), 1);     // y is a vowel
  EXPECT_EQ(count_syllables("TV"), 1);         // at least one
}

TEST(Readability, WordsAndSentences) {
  ReadabilityCounts c = count_readability("The cat sat on the mat.");
  EXPECT_EQ(c.words, 6);
  EXPECT_EQ(c.sentences, 1);
  EXPECT_EQ(c.syllables, 6);
  c = count_readability("Don't stop!  Go... now?\nYes, 42 times");
  EXPECT_EQ(c.words, 6);      // don't, stop, go, now, yes, times (42 has no letter)
  EXPECT_EQ(c.sentences, 4);  // the unterminated tail counts as one
  c = count_readability("Version 2.5 is out.");  // no sentence break inside 2.5
  EXPECT_EQ(c.sentences, 1);
  EXPECT_EQ(count_readability("  -- ").words, 0);
}

TEST(Readability, FleschKincaidGrade) {
  const ReadabilityCounts c = count_readability("The cat sat on the mat.");
  EXPECT_NEAR(flesch_kincaid_grade(c), 0.39 * 6 + 11.8 * 1 - 15.59, 1e-12);
  EXPECT_THROW(flesch_kincaid_grade(ReadabilityCounts{}), zt::Error);
  // Longer words and sentences read as a higher grade.
  EXPECT_GT(flesch_kincaid_grade(count_readability(
                "Comprehensive institutional considerations necessitate deliberation.")),
            flesch_kincaid_grade(count_readability("I like it. We go now.")));
}

}  // namespace
}  // namespace zt::examples
