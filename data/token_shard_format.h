#pragma once
// The token shard file format (".ztt"), written once by zt-pretokenize (TokenShardWriter) and
// memory-mapped by TokenDataset. One file, little-endian, every section 64-byte aligned:
//
//   [0, 128)            ShardHeader (below)
//   meta_offset         meta_bytes of UTF-8 text, "key=value\n" lines (tokenizer path and pad/bos/
//                       eos ids, label field names, the command that wrote it): for people and
//                       tools
//   offsets_offset      (num_samples + 1) int64: sample i is tokens [offsets[i], offsets[i+1]);
//                       offsets[0] = 0, non-decreasing, offsets[num_samples] = num_tokens. The
//                       sample lengths are the differences, so no separate length array is kept.
//   labels_offset       (num_samples, num_label_fields) int64, row-major (absent when 0 fields)
//   tokens_offset       num_tokens tokens, uint16 when the vocabulary fits (token_bytes = 2),
//                       else uint32 (token_bytes = 4)
//   file_size           = end of the tokens section; a longer or shorter file is rejected.
//
// checksum: ShardChecksum over the bytes [meta_offset, file_size), so a flipped bit anywhere past
// the header is caught when the reader verifies it (TokenDatasetOptions::verify_checksum).

#include <cstddef>
#include <cstdint>

namespace zt::data {

inline constexpr char kShardMagic[8] = {'Z', 'T', 'T', 'O', 'K', 'E', 'N', 'S'};
inline constexpr uint32_t kShardVersion = 1;
inline constexpr uint64_t kShardAlignment = 64;

struct ShardHeader {
  char magic[8];         // kShardMagic, no terminating zero
  uint32_t version;      // kShardVersion
  uint32_t token_bytes;  // 2 (uint16) or 4 (uint32)
  uint64_t num_samples;
  uint64_t num_tokens;
  uint32_t num_label_fields;  // int64 labels per sample (0: no labels)
  uint32_t vocab_size;        // every token id is < vocab_size
  uint64_t tokenizer_id;      // Tokenizer::id() of the model that encoded the shard (0: unknown)
  uint64_t meta_offset;
  uint64_t meta_bytes;
  uint64_t offsets_offset;
  uint64_t labels_offset;
  uint64_t tokens_offset;
  uint64_t file_size;
  uint64_t checksum;     // ShardChecksum of [meta_offset, file_size)
  uint64_t reserved[3];  // zero
};
static_assert(sizeof(ShardHeader) == 128, "the on-disk header is 128 bytes");

// 64-bit FNV-1a over 8-byte little-endian words (a tail shorter than 8 bytes is zero-padded), with
// the byte count mixed in at the end. Incremental: any split of the same bytes into update()
// calls gives the same digest, so a writer feeds its sections in order without concatenating.
class ShardChecksum {
 public:
  void update(const void* data, size_t bytes);
  uint64_t digest() const;

 private:
  uint64_t hash_ = 0xcbf29ce484222325ULL;
  uint64_t bytes_ = 0;
  unsigned char pending_[8] = {};
  size_t num_pending_ = 0;
};

inline uint64_t align_up(uint64_t x, uint64_t a) {
  return (x + a - 1) / a * a;
}

}  // namespace zt::data
