#include "data/tokenizer.h"

#include <fstream>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <sstream>
#include <unordered_map>

#include "base/error.h"
#include "data/random.h"
#include "data/token_shard_format.h"

// Exported by libsentencepiece but not declared in its public headers (0.1.97): the trainer
// otherwise prints hundreds of progress lines per model.
namespace sentencepiece::logging {
void SetMinLogLevel(int v);
}

namespace zt::data {
namespace {

// Feeds the (sampled) sentences to the trainer without writing a temporary file.
class VectorIterator : public sentencepiece::SentenceIterator {
 public:
  VectorIterator(const std::vector<std::string>& sentences, std::vector<int64_t> order)
      : sentences_(sentences), order_(std::move(order)) {}
  bool done() const override { return pos_ >= order_.size(); }
  void Next() override { ++pos_; }
  const std::string& value() const override { return sentences_[order_[pos_]]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const std::vector<std::string>& sentences_;
  std::vector<int64_t> order_;
  size_t pos_ = 0;
};

}  // namespace

struct Tokenizer::Impl {
  sentencepiece::SentencePieceProcessor sp;
};

Tokenizer::Tokenizer(const std::string& model_proto)
    : impl_(std::make_unique<Impl>()), serialized_(model_proto) {
  auto status = impl_->sp.LoadFromSerializedProto(model_proto);
  ZT_CHECK(status.ok(), "tokenizer: not a SentencePiece model: ", status.ToString());
  ShardChecksum sum;
  sum.update(model_proto.data(), model_proto.size());
  id_ = sum.digest();
}

Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::train(const std::vector<std::string>& sentences,
                           const TokenizerTrainOptions& options) {
  ZT_CHECK(!sentences.empty(), "tokenizer: no sentences to train on");
  ZT_CHECK(options.model_type == "bpe" || options.model_type == "unigram",
           "tokenizer: model_type must be bpe or unigram, got ", options.model_type);
  std::vector<int64_t> order;
  const auto n = static_cast<int64_t>(sentences.size());
  if (options.max_sentences > 0 && options.max_sentences < n) {
    order = permutation(n, options.seed, /*stream=*/0x5e17);
    order.resize(static_cast<size_t>(options.max_sentences));
  } else {
    order.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  }
  sentencepiece::logging::SetMinLogLevel(1);
  sentencepiece::SetRandomGeneratorSeed(static_cast<unsigned>(options.seed));
  std::unordered_map<std::string, std::string> args = {
      {"model_type", options.model_type},
      {"vocab_size", std::to_string(options.vocab_size)},
      {"character_coverage", std::to_string(options.character_coverage)},
      {"num_threads", std::to_string(options.num_threads)},
      {"pad_id", "0"},
      {"unk_id", "1"},
      {"bos_id", "2"},
      {"eos_id", "3"},
      {"max_sentence_length", "65536"},
      // The sample is already drawn above; let the trainer take all of it.
      {"input_sentence_size", "0"},
      {"shuffle_input_sentence", "false"},
      {"hard_vocab_limit", "false"},
  };
  VectorIterator it(sentences, std::move(order));
  std::string proto;
  auto status = sentencepiece::SentencePieceTrainer::Train(args, &it, &proto);
  ZT_CHECK(status.ok(), "tokenizer: SentencePiece training failed: ", status.ToString());
  return Tokenizer(proto);
}

Tokenizer Tokenizer::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ZT_CHECK(in, "tokenizer model ", path, ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return Tokenizer(ss.str());
  } catch (const std::exception&) {
    ZT_THROW("tokenizer model ", path, ": not a SentencePiece model file");
  }
}

Tokenizer Tokenizer::from_serialized(const std::string& model_proto) {
  return Tokenizer(model_proto);
}

void Tokenizer::save(const std::string& path) const {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(serialized_.data(), static_cast<std::streamsize>(serialized_.size()));
  ZT_CHECK(out.good(), "tokenizer model ", path, ": write failed");
}

std::vector<int> Tokenizer::encode(const std::string& text, const EncodeOptions& options) const {
  std::vector<int> body;
  sentencepiece::util::Status status =
      options.enable_sampling
          ? impl_->sp.SampleEncode(text, options.nbest_size, options.alpha, &body)
          : impl_->sp.Encode(text, &body);
  ZT_CHECK(status.ok(), "tokenizer: encoding failed: ", status.ToString());
  if (!options.add_bos && !options.add_eos) return body;
  std::vector<int> ids;
  ids.reserve(body.size() + 2);
  if (options.add_bos) {
    ZT_CHECK(bos_id() >= 0, "tokenizer: add_bos asked but the model has no bos piece");
    ids.push_back(bos_id());
  }
  ids.insert(ids.end(), body.begin(), body.end());
  if (options.add_eos) {
    ZT_CHECK(eos_id() >= 0, "tokenizer: add_eos asked but the model has no eos piece");
    ids.push_back(eos_id());
  }
  return ids;
}

std::string Tokenizer::decode(const std::vector<int>& ids) const {
  std::string text;
  auto status = impl_->sp.Decode(ids, &text);
  ZT_CHECK(status.ok(), "tokenizer: decoding failed: ", status.ToString());
  return text;
}

std::string Tokenizer::id_to_piece(int id) const {
  return impl_->sp.IdToPiece(id);
}
int Tokenizer::vocab_size() const {
  return impl_->sp.GetPieceSize();
}
int Tokenizer::pad_id() const {
  return impl_->sp.pad_id();
}
int Tokenizer::unk_id() const {
  return impl_->sp.unk_id();
}
int Tokenizer::bos_id() const {
  return impl_->sp.bos_id();
}
int Tokenizer::eos_id() const {
  return impl_->sp.eos_id();
}

void Tokenizer::set_sampling_seed(uint32_t seed) {
  sentencepiece::SetRandomGeneratorSeed(seed);
}

}  // namespace zt::data
