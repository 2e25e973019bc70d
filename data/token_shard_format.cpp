#include "data/token_shard_format.h"

#include <algorithm>
#include <cstring>

namespace zt::data {
namespace {

constexpr uint64_t kFnvPrime = 0x100000001b3ULL;

uint64_t mix(uint64_t hash, uint64_t word) {
  hash ^= word;
  hash *= kFnvPrime;
  // FNV's multiply only carries information upwards; fold the high half back so the low bits
  // of later words depend on the high bits of earlier ones.
  return hash ^ (hash >> 29);
}

}  // namespace

void ShardChecksum::update(const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  bytes_ += bytes;
  if (num_pending_ > 0) {  // complete the word left over from the last call
    const size_t take = std::min<size_t>(8 - num_pending_, bytes);
    std::memcpy(pending_ + num_pending_, p, take);
    num_pending_ += take;
    p += take;
    bytes -= take;
    if (num_pending_ < 8) return;
    uint64_t w;
    std::memcpy(&w, pending_, 8);
    hash_ = mix(hash_, w);
    num_pending_ = 0;
  }
  for (; bytes >= 8; bytes -= 8, p += 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    hash_ = mix(hash_, w);
  }
  // Fewer than 8 bytes left, and nothing pending.
  if (bytes > 0) std::memcpy(pending_, p, bytes);
  num_pending_ = bytes;
}

uint64_t ShardChecksum::digest() const {
  uint64_t h = hash_;
  if (num_pending_ > 0) {
    unsigned char tail[8] = {};
    std::memcpy(tail, pending_, num_pending_);
    uint64_t w;
    std::memcpy(&w, tail, 8);
    h = mix(h, w);
  }
  return mix(h, bytes_);
}

}  // namespace zt::data
