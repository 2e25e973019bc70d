#include "examples/classifier/readability.h"

#include <cctype>

#include "base/error.h"

namespace zt::examples {
namespace {

bool is_letter(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) != 0;
}
bool is_word_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0;
}
bool is_vowel(char c) {
  switch (std::tolower(static_cast<unsigned char>(c))) {
    case 'a':
    case 'e':
    case 'i':
    case 'o':
    case 'u':
    case 'y': return true;
    default: return false;
  }
}
bool is_terminator(char c) {
  return c == '.' || c == '!' || c == '?';
}
bool closes_sentence(char next) {
  return std::isspace(static_cast<unsigned char>(next)) || next == '"' || next == '\'' ||
         next == ')' || next == ']';
}

}  // namespace

int64_t count_syllables(std::string_view word) {
  int64_t groups = 0;
  bool in_vowels = false;
  for (char c : word) {
    const bool v = is_vowel(c);
    if (v && !in_vowels) ++groups;
    in_vowels = v;
  }
  const size_t n = word.size();
  auto lower = [&](size_t i) { return std::tolower(static_cast<unsigned char>(word[i])); };
  // Silent final e: "make" (1), but "table" (2) and "be" (1) keep theirs.
  if (groups > 1 && n >= 2 && lower(n - 1) == 'e' && !is_vowel(word[n - 2]) &&
      !(n >= 3 && lower(n - 2) == 'l' && !is_vowel(word[n - 3]))) {
    --groups;
  }
  return groups < 1 ? 1 : groups;
}

ReadabilityCounts count_readability(std::string_view text) {
  ReadabilityCounts c;
  bool pending_words = false;  // words since the last sentence end
  size_t i = 0;
  while (i < text.size()) {
    if (is_word_char(text[i])) {
      size_t j = i;
      bool letter = false;
      // Inner apostrophes stay in the word ("don't"); a trailing one does not.
      while (j < text.size() && (is_word_char(text[j]) || (text[j] == '\'' && j + 1 < text.size() &&
                                                           is_letter(text[j + 1]) && j > i))) {
        letter = letter || is_letter(text[j]);
        ++j;
      }
      if (letter) {
        ++c.words;
        c.syllables += count_syllables(text.substr(i, j - i));
        pending_words = true;
      }
      i = j;
    } else if (is_terminator(text[i])) {
      size_t j = i;
      while (j < text.size() && is_terminator(text[j])) ++j;
      if (pending_words && (j == text.size() || closes_sentence(text[j]))) {
        ++c.sentences;
        pending_words = false;
      }
      i = j;
    } else {
      ++i;
    }
  }
  if (pending_words) ++c.sentences;
  return c;
}

double flesch_kincaid_grade(const ReadabilityCounts& c) {
  ZT_CHECK(c.words > 0 && c.sentences > 0, "readability: a text needs words (got ", c.words, ")");
  return 0.39 * static_cast<double>(c.words) / static_cast<double>(c.sentences) +
         11.8 * static_cast<double>(c.syllables) / static_cast<double>(c.words) - 15.59;
}

}  // namespace zt::examples
