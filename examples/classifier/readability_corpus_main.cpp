// zt-readability-corpus: labels texts with their Flesch-Kincaid grade (readability.h) and writes
// JSONL for zt-pretokenize, one object per text:
//
//   {"text": "Fortune favors the bold.", "grade_centi": 512}    # grade 5.12, in hundredths
//
// (shard labels are integers). Then:
//   zt-pretokenize --format jsonl --input fk.jsonl --label-fields grade_centi ...
//
//   zt-readability-corpus --format fortune --input $(cat corpora/fortunes.list) --output fk.jsonl

#include <algorithm>
#include <boost/program_options.hpp>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/logging.h"
#include "base/main_guard.h"
#include "data/text_reader.h"
#include "examples/classifier/readability.h"

namespace po = boost::program_options;

namespace zt::examples {
namespace {

struct Args {
  std::vector<std::string> inputs;
  std::string format = "fortune";
  std::string output;
  int64_t min_words = 3;
  int64_t max_words = 150;
  int64_t max_samples = 0;
};

// A JSON string literal: quotes, backslashes and control characters escaped; other bytes
// (UTF-8 included) as they are.
std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

int run(const Args& a) {
  ZT_CHECK(!a.inputs.empty() && !a.output.empty(), "zt-readability-corpus: needs --input and ",
           "--output");
  data::TextReaderOptions ro;
  ro.format = data::parse_text_format(a.format);
  data::TextCorpus corpus = data::read_text_files(a.inputs, ro);
  std::ofstream out(a.output, std::ios::trunc);
  ZT_CHECK(out.good(), "zt-readability-corpus: cannot write ", a.output);
  int64_t kept = 0, skipped = 0;
  double sum = 0, sum_sq = 0;
  for (const std::string& text : corpus.texts) {
    if (a.max_samples > 0 && kept == a.max_samples) break;
    const ReadabilityCounts c = count_readability(text);
    if (c.words < a.min_words || c.words > a.max_words) {
      ++skipped;
      continue;
    }
    const double grade = flesch_kincaid_grade(c);
    out << "{\"text\": " << json_string(text) << ", \"grade_centi\": " << std::llround(grade * 100)
        << "}\n";
    ++kept;
    sum += grade;
    sum_sq += grade * grade;
  }
  out.close();
  ZT_CHECK(out.good(), "zt-readability-corpus: write to ", a.output, " failed");
  ZT_CHECK(kept > 0, "zt-readability-corpus: no text of ", a.min_words, "..", a.max_words,
           " words in the input");
  const double mean = sum / kept;
  ZT_LOG_INFO("wrote ", a.output, ": ", kept, " texts (", skipped, " outside ", a.min_words, "..",
              a.max_words, " words), grade mean ", mean, ", std ",
              std::sqrt(std::max(0.0, sum_sq / kept - mean * mean)));
  return 0;
}

}  // namespace
}  // namespace zt::examples

int main(int argc, char** argv) {
  return zt::run_main("zt-readability-corpus", [&] {
    zt::examples::Args a;
    po::options_description desc(
        "zt-readability-corpus: texts -> JSONL with their Flesch-Kincaid grade (grade_centi)");
    desc.add_options()("help,h", "this help")("input,i", po::value(&a.inputs)->multitoken(),
                                              "input files")(
        "format", po::value(&a.format)->default_value("fortune"), "lines | fortune")(
        "output,o", po::value(&a.output), "JSONL output")(
        "min-words", po::value(&a.min_words)->default_value(3), "skip shorter texts")(
        "max-words", po::value(&a.max_words)->default_value(150), "skip longer texts")(
        "max-samples", po::value(&a.max_samples)->default_value(0),
        "stop after this many texts (0 = all)");
    po::variables_map vm;
    po::store(po::command_line_parser(argc, argv).options(desc).run(), vm);
    po::notify(vm);
    if (vm.count("help")) {
      std::cout << desc << "\n";
      return 0;
    }
    return zt::examples::run(a);
  });
}
