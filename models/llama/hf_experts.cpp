#include "models/llama/hf_experts.h"

#include <algorithm>

#include <ATen/ATen.h>

#include "base/error.h"

namespace zt::models {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace

std::vector<StoredPiece> per_expert_pieces(const std::string& model_type, const std::string& name,
                                           const std::vector<int64_t>& shape) {
  const bool mixtral = model_type == "mixtral";
  if (!mixtral && model_type != "qwen2_moe" && model_type != "qwen3_moe") return {};
  const std::string gate_up = ".mlp.experts.gate_up_proj", down = ".mlp.experts.down_proj",
                    router = ".mlp.gate.weight";
  std::string prefix;  // "model.layers.<i>"
  for (const std::string* tail : {&gate_up, &down, &router}) {
    if (ends_with(name, *tail)) prefix = name.substr(0, name.size() - tail->size());
  }
  if (prefix.empty()) return {};
  const std::string block = prefix + (mixtral ? ".block_sparse_moe." : ".mlp.");
  if (ends_with(name, router)) {
    if (!mixtral) return {};
    return {{block + "gate.weight", shape}};
  }
  ZT_INTERNAL_ASSERT(shape.size() == 3, name, " is not (experts, rows, columns)");
  std::vector<StoredPiece> pieces;
  const std::vector<int64_t> matrix = {ends_with(name, gate_up) ? shape[1] / 2 : shape[1],
                                       shape[2]};
  for (int64_t e = 0; e < shape[0]; ++e) {
    const std::string expert = block + "experts." + std::to_string(e) + ".";
    if (ends_with(name, gate_up)) {
      pieces.push_back({expert + (mixtral ? "w1" : "gate_proj") + ".weight", matrix});
      pieces.push_back({expert + (mixtral ? "w3" : "up_proj") + ".weight", matrix});
    } else {
      pieces.push_back({expert + (mixtral ? "w2" : "down_proj") + ".weight", matrix});
    }
  }
  return pieces;
}

PerExpertWeights::PerExpertWeights(zero::ShardWeightSource& inner,
                                   std::function<bool(const std::string&)> stored,
                                   std::string model_type, std::string where)
    : inner_(inner),
      stored_(std::move(stored)),
      model_type_(std::move(model_type)),
      where_(std::move(where)) {}

void PerExpertWeights::fill(const std::string& name, at::IntArrayRef shape, int64_t begin,
                            const at::Tensor& dst) {
  const std::vector<StoredPiece> pieces = stored_(name)
                                              ? std::vector<StoredPiece>{}
                                              : per_expert_pieces(model_type_, name, shape.vec());
  if (pieces.empty()) {
    inner_.fill(name, shape, begin, dst);
    return;
  }
  // Every piece is asked for on every rank (an empty run where this rank holds none of it), so a
  // missing expert is the same error everywhere.
  const int64_t end = begin + dst.numel();
  int64_t offset = 0;
  for (const StoredPiece& piece : pieces) {
    ZT_CHECK(stored_(piece.name), where_, ": no tensor '", piece.name, "' for parameter ", name,
             " (nor the parameter itself, fused)");
    const int64_t n = numel_of(piece.shape);
    const int64_t lo = std::max(begin, offset), hi = std::min(end, offset + n);
    if (hi > lo) {
      inner_.fill(piece.name, piece.shape, lo - offset, dst.narrow(0, lo - begin, hi - lo));
    } else {
      inner_.fill(piece.name, piece.shape, 0, dst.narrow(0, 0, 0));
    }
    offset += n;
  }
}

}  // namespace zt::models
