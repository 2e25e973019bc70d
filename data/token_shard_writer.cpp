#include "data/token_shard_writer.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "base/error.h"
#include "data/token_shard_format.h"

namespace zt::data {
namespace {

struct FileCloser {
  void operator()(std::FILE* f) const {
    if (f) std::fclose(f);
  }
};

// Writes sections at increasing offsets, zero-filling the alignment gaps, and checksums every
// byte after the header.
class SectionWriter {
 public:
  SectionWriter(std::FILE* file, std::string path) : file_(file), path_(std::move(path)) {}

  void put(const void* data, size_t bytes) {
    if (bytes == 0) return;
    ZT_CHECK(std::fwrite(data, 1, bytes, file_) == bytes, "shard ", path_,
             ": write failed (disk full?)");
    checksum_.update(data, bytes);
    pos_ += bytes;
  }
  void pad_to(uint64_t offset) {
    static const char kZeros[kShardAlignment] = {};
    ZT_INTERNAL_ASSERT(offset >= pos_ && offset - pos_ <= kShardAlignment);
    put(kZeros, offset - pos_);
  }
  uint64_t pos() const { return pos_; }
  uint64_t checksum() const { return checksum_.digest(); }

 private:
  std::FILE* file_;
  std::string path_;
  uint64_t pos_ = sizeof(ShardHeader);
  ShardChecksum checksum_;
};

}  // namespace

TokenShardWriter::TokenShardWriter(ShardWriterOptions options) : options_(std::move(options)) {
  ZT_CHECK(options_.vocab_size > 0, "TokenShardWriter: vocab_size must be > 0");
}

void TokenShardWriter::add(const std::vector<int>& tokens, const std::vector<int64_t>& labels) {
  ZT_CHECK(labels.size() == options_.label_fields.size(), "TokenShardWriter: sample ",
           num_samples(), " has ", labels.size(), " labels, the shard declares ",
           options_.label_fields.size());
  for (int t : tokens) {
    ZT_CHECK(t >= 0 && static_cast<uint32_t>(t) < options_.vocab_size, "TokenShardWriter: sample ",
             num_samples(), " has token id ", t, " outside the vocabulary [0, ",
             options_.vocab_size, ")");
    tokens_.push_back(static_cast<uint32_t>(t));
  }
  offsets_.push_back(static_cast<int64_t>(tokens_.size()));
  labels_.insert(labels_.end(), labels.begin(), labels.end());
}

void TokenShardWriter::set_meta(const std::string& key, const std::string& value) {
  ZT_CHECK(key.find_first_of("=\n") == std::string::npos && value.find('\n') == std::string::npos,
           "TokenShardWriter: meta key/value must be one line without '=' in the key: ", key);
  meta_.emplace_back(key, value);
}

void TokenShardWriter::write(const std::string& path) const {
  std::string meta;
  std::string fields;
  for (size_t i = 0; i < options_.label_fields.size(); ++i) {
    fields += (i ? "," : "") + options_.label_fields[i];
  }
  meta += "label_fields=" + fields + "\n";
  for (const auto& [k, v] : meta_) meta += k + "=" + v + "\n";

  const uint64_t n = static_cast<uint64_t>(num_samples());
  const uint32_t tb = token_bytes();
  ShardHeader h{};
  std::memcpy(h.magic, kShardMagic, sizeof(h.magic));
  h.version = kShardVersion;
  h.token_bytes = tb;
  h.num_samples = n;
  h.num_tokens = tokens_.size();
  h.num_label_fields = static_cast<uint32_t>(options_.label_fields.size());
  h.vocab_size = options_.vocab_size;
  h.tokenizer_id = options_.tokenizer_id;
  h.meta_offset = sizeof(ShardHeader);
  h.meta_bytes = meta.size();
  h.offsets_offset = align_up(h.meta_offset + h.meta_bytes, kShardAlignment);
  h.labels_offset = align_up(h.offsets_offset + (n + 1) * sizeof(int64_t), kShardAlignment);
  h.tokens_offset = align_up(h.labels_offset + labels_.size() * sizeof(int64_t), kShardAlignment);
  h.file_size = h.tokens_offset + tokens_.size() * tb;

  const std::string tmp = path + ".tmp";
  std::unique_ptr<std::FILE, FileCloser> file(std::fopen(tmp.c_str(), "wb"));
  ZT_CHECK(file, "shard ", path, ": cannot open ", tmp, " for writing: ", std::strerror(errno));
  // Header last: its checksum covers the sections, so leave room now and fill it in at the end.
  ZT_CHECK(std::fwrite(&h, sizeof(h), 1, file.get()) == 1, "shard ", path, ": write failed");
  SectionWriter out(file.get(), path);
  out.put(meta.data(), meta.size());
  out.pad_to(h.offsets_offset);
  out.put(offsets_.data(), offsets_.size() * sizeof(int64_t));
  out.pad_to(h.labels_offset);
  out.put(labels_.data(), labels_.size() * sizeof(int64_t));
  out.pad_to(h.tokens_offset);
  if (tb == 4) {
    out.put(tokens_.data(), tokens_.size() * 4);
  } else {
    std::vector<uint16_t> narrow(tokens_.begin(), tokens_.end());
    out.put(narrow.data(), narrow.size() * 2);
  }
  ZT_INTERNAL_ASSERT(out.pos() == h.file_size);
  h.checksum = out.checksum();
  ZT_CHECK(std::fseek(file.get(), 0, SEEK_SET) == 0 &&
               std::fwrite(&h, sizeof(h), 1, file.get()) == 1 && std::fflush(file.get()) == 0,
           "shard ", path, ": write failed (disk full?)");
  file.reset();
  ZT_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "shard ", path, ": cannot rename ", tmp,
           ": ", std::strerror(errno));
}

}  // namespace zt::data
