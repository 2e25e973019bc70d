#pragma once
// The classifier example's target: the Flesch-Kincaid grade level of a text, computed from the
// text itself, so the labelled data ships with the project (Debian's fortunes, the KJV).
//
//   grade = 0.39 * words / sentences + 11.8 * syllables / words - 15.59
//
// Counting rules (plain ASCII heuristics, the usual ones of readability tools):
//   word      a maximal run of letters, digits and inner apostrophes holding at least one letter
//   sentence  a run of '.', '!' or '?' that ends the text or is followed by whitespace or a
//             quote/bracket; a text with words and no terminator is one sentence
//   syllables per word: groups of consecutive vowels (a e i o u y), minus a silent final 'e'
//             (not "-le"), at least 1
// Bytes >= 0x80 (UTF-8) count as neither letters nor punctuation.

#include <cstdint>
#include <string_view>

namespace zt::examples {

struct ReadabilityCounts {
  int64_t words = 0;
  int64_t sentences = 0;
  int64_t syllables = 0;
};

ReadabilityCounts count_readability(std::string_view text);
int64_t count_syllables(std::string_view word);
// The grade of the counts; requires words > 0.
double flesch_kincaid_grade(const ReadabilityCounts& counts);

}  // namespace zt::examples
