#pragma once
// Reading raw text corpora for pre-tokenization and on-the-fly encoding.
//
// Formats:
//   lines    one sample per line (empty lines skipped)
//   jsonl    one JSON object per line; the sample's text is the string field `text_field`,
//            its labels the fields `label_fields` (integers, booleans, or strings: strings are
//            mapped to ids 0, 1, ... in sorted order of the distinct values, per field; the
//            mapping is returned so it can be stored with the shard)
//   fortune  fortune(6) files: entries separated by lines holding only '%'; the lines of an entry
//            are joined with single spaces (SentencePiece trains on one line per sentence)
// Errors name the file and line: "corpus a.jsonl:17: field 'label' is missing".

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace zt::data {

enum class TextFormat { kLines, kJsonl, kFortune };
TextFormat parse_text_format(const std::string& name);  // "lines" | "jsonl" | "fortune"

struct TextReaderOptions {
  TextFormat format = TextFormat::kLines;
  std::string text_field = "text";
  std::vector<std::string> label_fields;
};

struct TextCorpus {
  std::vector<std::string> texts;
  std::vector<std::vector<int64_t>> labels;  // (num_samples, label_fields.size())
  // For string-valued label fields: field -> values in id order.
  std::map<std::string, std::vector<std::string>> label_vocab;
};

// Appends the samples of every file in order.
TextCorpus read_text_files(const std::vector<std::string>& paths, const TextReaderOptions& options);

}  // namespace zt::data
