#include "data/token_dataset.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <optional>
#include <sstream>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"

namespace zt::data {

void TokenSpan::copy_to(int64_t* out) const {
  if (token_bytes_ == 2) {
    const uint16_t* p = u16();
    for (int64_t k = 0; k < size_; ++k) out[k] = p[k];
  } else {
    const uint32_t* p = u32();
    for (int64_t k = 0; k < size_; ++k) out[k] = p[k];
  }
}

TokenDataset::TokenDataset(const std::string& path, TokenDatasetOptions options) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ZT_CHECK(fd_ >= 0, "shard ", path, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  ZT_CHECK(::fstat(fd_, &st) == 0, "shard ", path, ": cannot stat: ", std::strerror(errno));
  mapped_bytes_ = static_cast<uint64_t>(st.st_size);
  try {
    ZT_CHECK(mapped_bytes_ >= sizeof(ShardHeader), "shard ", path, ": file is ", mapped_bytes_,
             " bytes, shorter than the ", sizeof(ShardHeader),
             "-byte header (empty or truncated file?)");
    void* p = ::mmap(nullptr, mapped_bytes_, PROT_READ, MAP_SHARED, fd_, 0);
    ZT_CHECK(p != MAP_FAILED, "shard ", path, ": mmap failed: ", std::strerror(errno));
    base_ = static_cast<const unsigned char*>(p);
    validate(options);
  } catch (...) {
    if (base_) ::munmap(const_cast<unsigned char*>(base_), mapped_bytes_);
    ::close(fd_);
    throw;
  }
}

TokenDataset::~TokenDataset() {
  if (base_) ::munmap(const_cast<unsigned char*>(base_), mapped_bytes_);
  if (fd_ >= 0) ::close(fd_);
}

void TokenDataset::validate(const TokenDatasetOptions& options) {
  const std::string& p = path_;
  std::memcpy(&header_, base_, sizeof(header_));
  const ShardHeader& h = header_;
  ZT_CHECK(std::memcmp(h.magic, kShardMagic, sizeof(kShardMagic)) == 0, "shard ", p,
           ": header magic is not ZTTOKENS (not a zerotorch shard?)");
  ZT_CHECK(h.version == kShardVersion, "shard ", p, ": format version ", h.version,
           ", this build reads version ", kShardVersion, " (re-run zt-pretokenize)");
  ZT_CHECK(h.token_bytes == 2 || h.token_bytes == 4, "shard ", p, ": token width ", h.token_bytes,
           " bytes, expected 2 or 4 (corrupt header)");
  ZT_CHECK(mapped_bytes_ == h.file_size, "shard ", p, ": file is ", mapped_bytes_,
           " bytes, header says ", h.file_size,
           mapped_bytes_ < h.file_size ? " (truncated copy?)" : " (trailing garbage?)");
  // Section bounds, in order; overflow-safe because every count is bounded by the file size first.
  const uint64_t n = h.num_samples;
  ZT_CHECK(n < mapped_bytes_ && h.num_tokens <= mapped_bytes_ && h.num_label_fields < (1u << 16),
           "shard ", p, ": counts in the header exceed the file (corrupt header)");
  auto section_ok = [&](uint64_t off, uint64_t bytes, uint64_t next) {
    return off % kShardAlignment == 0 && off <= mapped_bytes_ && bytes <= mapped_bytes_ - off &&
           off + bytes <= next;
  };
  ZT_CHECK(h.meta_offset == sizeof(ShardHeader) &&
               section_ok(h.meta_offset, h.meta_bytes, h.offsets_offset) &&
               section_ok(h.offsets_offset, (n + 1) * 8, h.labels_offset) &&
               section_ok(h.labels_offset, n * h.num_label_fields * 8, h.tokens_offset) &&
               section_ok(h.tokens_offset, h.num_tokens * h.token_bytes, h.file_size) &&
               h.tokens_offset + h.num_tokens * h.token_bytes == h.file_size,
           "shard ", p, ": section offsets in the header do not fit the file (corrupt header)");
  if (options.verify_checksum) {
    ShardChecksum sum;
    sum.update(base_ + h.meta_offset, h.file_size - h.meta_offset);
    ZT_CHECK(sum.digest() == h.checksum, "shard ", p,
             ": checksum mismatch (file corrupted or modified after writing)");
  }
  offsets_ = reinterpret_cast<const int64_t*>(base_ + h.offsets_offset);
  labels_ = reinterpret_cast<const int64_t*>(base_ + h.labels_offset);
  tokens_ = base_ + h.tokens_offset;
  ZT_CHECK(offsets_[0] == 0 && static_cast<uint64_t>(offsets_[n]) == h.num_tokens, "shard ", p,
           ": index does not span the tokens (offsets[0] = ", offsets_[0], ", offsets[", n,
           "] = ", offsets_[n], ", num_tokens = ", h.num_tokens, ")");
  for (uint64_t i = 0; i < n; ++i) {
    ZT_CHECK(offsets_[i] <= offsets_[i + 1], "shard ", p, ": index offsets decrease at sample ", i,
             " (corrupt index)");
  }
  meta_.assign(reinterpret_cast<const char*>(base_ + h.meta_offset), h.meta_bytes);
  std::string fields = meta_value("label_fields");
  std::stringstream ss(fields);
  for (std::string f; std::getline(ss, f, ',');) label_fields_.push_back(f);
  ZT_CHECK(label_fields_.size() == h.num_label_fields, "shard ", p, ": meta names ",
           label_fields_.size(), " label fields, header says ", h.num_label_fields);
}

std::string TokenDataset::meta_value(const std::string& key) const {
  std::stringstream ss(meta_);
  for (std::string line; std::getline(ss, line);) {
    if (line.size() > key.size() && line.compare(0, key.size(), key) == 0 &&
        line[key.size()] == '=') {
      return line.substr(key.size() + 1);
    }
  }
  return "";
}

namespace {

// The whole of `text` as a base-10 integer, or nullopt.
std::optional<int64_t> parse_int(const std::string& text) {
  if (text.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end != text.c_str() + text.size()) return std::nullopt;
  return static_cast<int64_t>(v);
}

}  // namespace

int64_t TokenDataset::pad_id() const {
  const std::string text = meta_value("pad_id");
  ZT_CHECK(!text.empty(), "shard ", path_,
           ": no pad_id in its meta (re-run zt-pretokenize, or call "
           "TokenShardWriter::set_meta(\"pad_id\", ...) when writing it)");
  const std::optional<int64_t> pad = parse_int(text);
  ZT_CHECK(pad.has_value(), "shard ", path_, ": pad_id '", text, "' in its meta is not an integer");
  int64_t id = *pad;
  if (id == -1) {
    const std::optional<int64_t> eos = parse_int(meta_value("eos_id"));
    ZT_CHECK(eos.has_value() && *eos >= 0, "shard ", path_,
             ": pad_id is -1 (its SentencePiece model has no pad piece) and there is no eos_id to "
             "pad with instead; set a pad piece (spm_train --pad_id) and re-run zt-pretokenize");
    id = *eos;
  }
  ZT_CHECK(id >= 0 && id < static_cast<int64_t>(header_.vocab_size), "shard ", path_, ": pad id ",
           id, " in its meta is outside the vocabulary [0, ", header_.vocab_size, ")");
  return id;
}

void TokenDataset::check_index(int64_t i) const {
  ZT_CHECK(i >= 0 && i < size(), "shard ", path_, ": sample index ", i, " out of range [0, ",
           size(), ")");
}

TokenSpan TokenDataset::tokens(int64_t i) const {
  check_index(i);
  const auto* start =
      static_cast<const unsigned char*>(tokens_) + offsets_[i] * header_.token_bytes;
  return TokenSpan(start, offsets_[i + 1] - offsets_[i], header_.token_bytes);
}

at::Tensor TokenDataset::tensor(int64_t i) const {
  TokenSpan s = tokens(i);
  at::Tensor t = at::empty({s.size()}, at::kLong);
  s.copy_to(t.data_ptr<int64_t>());
  return t;
}

const int64_t* TokenDataset::labels(int64_t i) const {
  check_index(i);
  return labels_ + i * header_.num_label_fields;
}

int64_t TokenDataset::length(int64_t i) const {
  check_index(i);
  return offsets_[i + 1] - offsets_[i];
}

void TokenDataset::read_tokens(int64_t i, std::vector<int64_t>* out) const {
  TokenSpan s = tokens(i);
  out->resize(static_cast<size_t>(s.size()));
  s.copy_to(out->data());
}

void TokenDataset::read_labels(int64_t i, int64_t* out) const {
  const int64_t* l = labels(i);
  for (uint32_t k = 0; k < header_.num_label_fields; ++k) out[k] = l[k];
}

}  // namespace zt::data
