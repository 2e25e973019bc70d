#pragma once
// TokenShardWriter: collects encoded samples in memory and writes one token shard (layout in
// token_shard_format.h). The file is written under a temporary name and renamed, so a crash never
// leaves a half shard under the final name.
//
//   TokenShardWriter w({.vocab_size = 8000, .tokenizer_id = tok.id(), .label_fields = {"label"}});
//   w.set_meta("pad_id", std::to_string(tok.pad_id()));  // required by BatchStream
//   w.add(ids, {3});
//   w.write("train.ztt");

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace zt::data {

struct ShardWriterOptions {
  uint32_t vocab_size = 0;                // required: decides uint16 vs uint32 tokens
  uint64_t tokenizer_id = 0;              // Tokenizer::id(), 0 when unknown
  std::vector<std::string> label_fields;  // names of the int64 labels every sample carries
};

class TokenShardWriter {
 public:
  explicit TokenShardWriter(ShardWriterOptions options);

  // Appends one sample. Every id must be in [0, vocab_size); labels.size() must equal
  // label_fields.size().
  void add(const std::vector<int>& tokens, const std::vector<int64_t>& labels = {});
  // Free text stored in the meta section ("key=value" lines); '\n' in keys or values is refused.
  void set_meta(const std::string& key, const std::string& value);

  int64_t num_samples() const { return static_cast<int64_t>(offsets_.size()) - 1; }
  int64_t num_tokens() const { return static_cast<int64_t>(tokens_.size()); }
  // 2 or 4: the width the file will use.
  uint32_t token_bytes() const { return options_.vocab_size <= 65536 ? 2 : 4; }

  // Writes the shard (temporary file + rename); throws zt::Error naming the path on I/O failure.
  void write(const std::string& path) const;

 private:
  ShardWriterOptions options_;
  std::vector<uint32_t> tokens_;
  std::vector<int64_t> offsets_{0};
  std::vector<int64_t> labels_;  // (num_samples, num_label_fields)
  std::vector<std::pair<std::string, std::string>> meta_;
};

}  // namespace zt::data
