// zt-pretokenize: raw text -> SentencePiece ids -> token shard(s), once, before training.
//
//   zt-pretokenize --input kjv.txt --format lines --train-model kjv.model --vocab-size 8000
//       --train-sentences 20000 --add-eos --output kjv_train.ztt
//       --valid-output kjv_valid.ztt --valid-fraction 0.01
//
// The split into train and validation is a seeded random draw over samples (deterministic).
// A summary of the length distribution is printed at the end (pick max_length near p99).

#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <ctime>
#include <iostream>
#include <sstream>
#include <thread>

#include "base/error.h"
#include "base/logging.h"
#include "base/main_guard.h"
#include "data/length_stats.h"
#include "data/progress_bar.h"
#include "data/random.h"
#include "data/text_reader.h"
#include "data/token_shard_writer.h"
#include "data/tokenizer.h"

namespace po = boost::program_options;
using namespace zt::data;

namespace {

struct Args {
  std::vector<std::string> inputs;
  std::string format = "lines";
  std::string text_field = "text";
  std::string label_fields;
  std::string output;
  std::string valid_output;
  double valid_fraction = 0;
  std::string model;        // load this .model
  std::string train_model;  // or train one and save it here
  TokenizerTrainOptions train;
  EncodeOptions encode;
  int64_t min_length = 1;
  int threads = 0;
  uint64_t seed = 0;
};

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string f; std::getline(ss, f, ',');) {
    if (!f.empty()) out.push_back(f);
  }
  return out;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// CPU seconds of the process (all threads): on a shared machine wall time says little.
double cpu_seconds() {
  return static_cast<double>(std::clock()) / CLOCKS_PER_SEC;
}

// Encodes every text on `threads` threads (SentencePiece's Encode is const and thread-safe).
std::vector<std::vector<int>> encode_all(const Tokenizer& tok,
                                         const std::vector<std::string>& texts,
                                         const EncodeOptions& options, int threads) {
  std::vector<std::vector<int>> ids(texts.size());
  ProgressBar bar("encoding", static_cast<int64_t>(texts.size()));
  std::vector<std::thread> pool;
  std::exception_ptr error;
  std::mutex error_mutex;
  constexpr size_t kChunk = 256;
  std::atomic<size_t> next{0};
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      try {
        for (size_t begin; (begin = next.fetch_add(kChunk)) < texts.size();) {
          const size_t end = std::min(texts.size(), begin + kChunk);
          for (size_t i = begin; i < end; ++i) ids[i] = tok.encode(texts[i], options);
          bar.add(static_cast<int64_t>(end - begin));
        }
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    });
  }
  for (auto& t : pool) t.join();
  bar.finish();
  if (error) std::rethrow_exception(error);
  return ids;
}

int run(const Args& a, const std::string& command_line) {
  ZT_CHECK(!a.inputs.empty(), "no --input given");
  ZT_CHECK(!a.output.empty(), "no --output given");
  ZT_CHECK(a.model.empty() != a.train_model.empty(),
           "give exactly one of --model (load) and --train-model (train and save)");
  ZT_CHECK(a.valid_fraction >= 0 && a.valid_fraction < 1,
           "--valid-fraction must be in [0, 1), got ", a.valid_fraction);
  ZT_CHECK((a.valid_fraction > 0) == !a.valid_output.empty(),
           "--valid-fraction and --valid-output go together");

  auto t0 = std::chrono::steady_clock::now();
  TextReaderOptions ropt;
  ropt.format = parse_text_format(a.format);
  ropt.text_field = a.text_field;
  ropt.label_fields = split_commas(a.label_fields);
  TextCorpus corpus = read_text_files(a.inputs, ropt);
  ZT_CHECK(!corpus.texts.empty(), "the input holds no samples");
  ZT_LOG_INFO("read ", corpus.texts.size(), " samples from ", a.inputs.size(), " file(s) in ",
              seconds_since(t0), " s");

  // Split first, so the tokenizer never sees validation text.
  const auto n = static_cast<int64_t>(corpus.texts.size());
  std::vector<int64_t> order = permutation(n, a.seed, /*stream=*/0x5a11d);
  const auto num_valid = static_cast<int64_t>(static_cast<double>(n) * a.valid_fraction);
  std::vector<char> is_valid(static_cast<size_t>(n), 0);
  for (int64_t k = 0; k < num_valid; ++k) is_valid[static_cast<size_t>(order[k])] = 1;

  auto t1 = std::chrono::steady_clock::now();
  const double c1 = cpu_seconds();
  Tokenizer tok = [&] {
    if (!a.model.empty()) return Tokenizer::load(a.model);
    std::vector<std::string> train_texts;
    for (int64_t i = 0; i < n; ++i) {
      if (!is_valid[static_cast<size_t>(i)])
        train_texts.push_back(corpus.texts[static_cast<size_t>(i)]);
    }
    TokenizerTrainOptions topt = a.train;
    topt.seed = a.seed;
    topt.num_threads = a.threads;
    ZT_LOG_INFO(
        "training a ", topt.model_type, " SentencePiece model, vocab ", topt.vocab_size, ", on ",
        topt.max_sentences > 0
            ? std::min<int64_t>(topt.max_sentences, static_cast<int64_t>(train_texts.size()))
            : static_cast<int64_t>(train_texts.size()),
        " sentences");
    Tokenizer t = Tokenizer::train(train_texts, topt);
    t.save(a.train_model);
    ZT_LOG_INFO("tokenizer trained in ", seconds_since(t1), " s (cpu ", cpu_seconds() - c1,
                " s), saved to ", a.train_model);
    return t;
  }();

  auto t2 = std::chrono::steady_clock::now();
  const double c2 = cpu_seconds();
  std::vector<std::vector<int>> ids = encode_all(tok, corpus.texts, a.encode, a.threads);
  ZT_LOG_INFO("encoded ", n, " samples on ", a.threads, " thread(s) in ", seconds_since(t2),
              " s (cpu ", cpu_seconds() - c2, " s)");

  ShardWriterOptions wopt;
  wopt.vocab_size = static_cast<uint32_t>(tok.vocab_size());
  wopt.tokenizer_id = tok.id();
  wopt.label_fields = ropt.label_fields;
  TokenShardWriter train(wopt), valid(wopt);
  for (TokenShardWriter* w : {&train, &valid}) {
    w->set_meta("tokenizer", a.model.empty() ? a.train_model : a.model);
    w->set_meta("pad_id", std::to_string(tok.pad_id()));
    w->set_meta("bos_id", std::to_string(tok.bos_id()));
    w->set_meta("eos_id", std::to_string(tok.eos_id()));
    w->set_meta("command", command_line);
    for (const auto& [field, vocab] : corpus.label_vocab) {
      std::string joined;
      for (size_t k = 0; k < vocab.size(); ++k) joined += (k ? "," : "") + vocab[k];
      w->set_meta("label_vocab." + field, joined);
    }
  }
  int64_t skipped = 0;
  std::vector<int64_t> train_lengths;
  for (int64_t i = 0; i < n; ++i) {
    const auto& s = ids[static_cast<size_t>(i)];
    if (static_cast<int64_t>(s.size()) < a.min_length) {
      ++skipped;
      continue;
    }
    if (is_valid[static_cast<size_t>(i)]) {
      valid.add(s, corpus.labels[static_cast<size_t>(i)]);
    } else {
      train.add(s, corpus.labels[static_cast<size_t>(i)]);
      train_lengths.push_back(static_cast<int64_t>(s.size()));
    }
  }
  if (skipped)
    ZT_LOG_WARN("skipped ", skipped, " samples shorter than --min-length ", a.min_length);
  train.write(a.output);
  ZT_LOG_INFO("wrote ", a.output, ": ", train.num_samples(), " samples, ", train.num_tokens(),
              " tokens, uint", train.token_bytes() * 8);
  if (!a.valid_output.empty()) {
    valid.write(a.valid_output);
    ZT_LOG_INFO("wrote ", a.valid_output, ": ", valid.num_samples(), " samples, ",
                valid.num_tokens(), " tokens");
  }
  ZT_LOG_INFO("train lengths: ", summarize_lengths(train_lengths).to_string());
  ZT_LOG_INFO("total ", seconds_since(t0), " s (cpu ", cpu_seconds(), " s)");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return zt::run_main("zt-pretokenize", [&] {
    Args a;
    std::string model_type = "bpe";
    po::options_description desc(
        "zt-pretokenize: encode a text corpus with SentencePiece into zerotorch token shards");
    desc.add_options()("help,h", "this help")("input,i", po::value(&a.inputs)->multitoken(),
                                              "input files (repeatable)")(
        "format", po::value(&a.format)->default_value("lines"), "lines | jsonl | fortune")(
        "text-field", po::value(&a.text_field)->default_value("text"), "jsonl: the text field")(
        "label-fields", po::value(&a.label_fields), "jsonl: comma-separated label fields")(
        "output,o", po::value(&a.output), "train shard (.ztt)")(
        "valid-output", po::value(&a.valid_output), "validation shard (.ztt)")(
        "valid-fraction", po::value(&a.valid_fraction)->default_value(0.0),
        "fraction of samples held out for validation (seeded draw)")(
        "model", po::value(&a.model), "load this SentencePiece .model")(
        "train-model", po::value(&a.train_model), "train a model and save it to this path")(
        "vocab-size", po::value(&a.train.vocab_size)->default_value(8000), "training: vocab size")(
        "model-type", po::value(&model_type)->default_value("bpe"), "training: bpe | unigram")(
        "train-sentences", po::value(&a.train.max_sentences)->default_value(0),
        "training: sample this many sentences (0 = all); time grows with it")(
        "character-coverage", po::value(&a.train.character_coverage)->default_value(1.0),
        "training: SentencePiece character_coverage")("add-bos", po::bool_switch(&a.encode.add_bos),
                                                      "prepend <s> to every sample")(
        "add-eos", po::bool_switch(&a.encode.add_eos), "append </s> to every sample")(
        "min-length", po::value(&a.min_length)->default_value(1),
        "drop samples with fewer tokens (2 for causal LM: one input, one target)")(
        "threads", po::value(&a.threads)->default_value(0), "encoding threads (0 = all cores)")(
        "seed", po::value(&a.seed)->default_value(0), "seed of the split and the training sample");
    po::variables_map vm;
    po::store(po::command_line_parser(argc, argv).options(desc).run(), vm);
    po::notify(vm);
    if (vm.count("help")) {
      std::cout << desc << "\n";
      return 0;
    }
    a.train.model_type = model_type;
    if (a.threads <= 0) a.threads = std::max(1u, std::thread::hardware_concurrency());
    std::string command_line;
    for (int k = 0; k < argc; ++k) command_line += (k ? " " : "") + std::string(argv[k]);
    return run(a, command_line);
  });
}
