#pragma once
// Tokenizer: a SentencePiece model (BPE or unigram) behind a small interface, so nothing outside
// data/ includes SentencePiece. Train it from sentences in memory, or load a .model file.
//
// Ids of a model trained here: pad = 0, unk = 1, bos = 2, eos = 3, so id 0 never comes out of
// encode() and the collator's pad = 0 is unambiguous. A loaded model keeps its own ids (pad_id()
// may then be -1: choose the collator's pad id yourself).
//
// Subword regularization (training on many segmentations of the same text makes a model more
// accurate and robust): EncodeOptions::enable_sampling draws one segmentation per call instead of
// the best one; for unigram models from the nbest_size best with temperature alpha
// (nbest_size = -1: from the whole lattice), for BPE models by BPE-dropout with drop probability
// alpha. Draws come from SentencePiece's thread-local generators, seeded by set_sampling_seed();
// a multi-threaded loader therefore varies with thread scheduling.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace zt::data {

struct TokenizerTrainOptions {
  int vocab_size = 8000;
  std::string model_type = "bpe";  // "bpe" or "unigram"
  // Train on at most this many sentences, drawn uniformly (deterministic from seed) from the input;
  // 0 = all. Training time grows with the sample, quality saturates early (see data/README.md).
  int64_t max_sentences = 0;
  double character_coverage = 1.0;
  int num_threads = 2;
  uint64_t seed = 0;
};

struct EncodeOptions {
  bool add_bos = false;
  bool add_eos = false;
  bool enable_sampling = false;
  // unigram: sharpness of the sampling distribution, p ~ P(segmentation)^alpha (smaller =
  // more varied; 0.1 is common); BPE: the merge dropout probability
  float alpha = 0.1f;
  int nbest_size = -1;  // unigram only: sample from the n best segmentations; -1 = all
};

class Tokenizer {
 public:
  // Trains a model on `sentences` (texts longer than 64 KiB are skipped by SentencePiece).
  static Tokenizer train(const std::vector<std::string>& sentences,
                         const TokenizerTrainOptions& options);
  // Loads a SentencePiece .model file; throws zt::Error naming the path when it is not one.
  static Tokenizer load(const std::string& path);
  static Tokenizer from_serialized(const std::string& model_proto);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  void save(const std::string& path) const;
  // Thread-safe; with enable_sampling each call draws a new segmentation.
  std::vector<int> encode(const std::string& text, const EncodeOptions& options = {}) const;
  std::string decode(const std::vector<int>& ids) const;
  std::string id_to_piece(int id) const;

  int vocab_size() const;
  int pad_id() const;
  int unk_id() const;
  int bos_id() const;
  int eos_id() const;
  // 64-bit hash of the serialized model: two shards with the same id were encoded alike.
  uint64_t id() const { return id_; }
  const std::string& serialized() const { return serialized_; }

  // Seeds SentencePiece's sampling generators (process-wide).
  static void set_sampling_seed(uint32_t seed);

 private:
  struct Impl;
  explicit Tokenizer(const std::string& model_proto);

  std::unique_ptr<Impl> impl_;
  std::string serialized_;
  uint64_t id_ = 0;
};

}  // namespace zt::data
