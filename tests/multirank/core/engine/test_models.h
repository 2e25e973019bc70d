#pragma once
// Small models for the engine's equivalence tests: an MLP with odd sizes (padding in every flat
// buffer) and a two-block pre-LayerNorm transformer whose blocks are stage-3 units. Both have a
// frozen layer, which must stay bit-identical.

#include <cmath>
#include <limits>

#include <torch/torch.h>

#include "core/zero/call_unit.h"

namespace zt::testing {

struct MlpImpl : torch::nn::Module {
  MlpImpl() {
    frozen = register_module("frozen", torch::nn::Linear(7, 7));
    fc1 = register_module("fc1", torch::nn::Linear(7, 13));
    fc2 = register_module("fc2", torch::nn::Linear(13, 11));
    fc3 = register_module("fc3", torch::nn::Linear(11, 3));
    for (auto& p : frozen->parameters()) p.set_requires_grad(false);
  }
  // x: (B, 7) -> (B, 3)
  torch::Tensor forward(torch::Tensor x) {
    x = frozen->forward(x);
    x = torch::tanh(fc1->forward(x));
    x = torch::relu(fc2->forward(x));
    return fc3->forward(x);
  }
  torch::nn::Linear frozen{nullptr}, fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
};
TORCH_MODULE(Mlp);

struct BlockImpl : torch::nn::Module {
  BlockImpl(int64_t c, int64_t heads) : heads_(heads) {
    ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c})));
    // No bias on q, k, v: the key bias has an exactly-zero gradient (softmax ignores a per-row
    // constant), so Adam would amplify rounding noise in it and no two summation orders agree.
    qkv = register_module("qkv", torch::nn::Linear(torch::nn::LinearOptions(c, 3 * c).bias(false)));
    proj = register_module("proj", torch::nn::Linear(c, c));
    ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c})));
    fc = register_module("fc", torch::nn::Linear(c, 4 * c));
    out = register_module("out", torch::nn::Linear(4 * c, c));
  }
  // x: (B, T, C) -> (B, T, C), causal self-attention then MLP, both pre-LayerNorm residual.
  torch::Tensor forward(torch::Tensor x) {
    const int64_t b = x.size(0), t = x.size(1), c = x.size(2), d = c / heads_;
    auto parts = qkv->forward(ln1->forward(x)).chunk(3, -1);
    auto split = [&](const torch::Tensor& y) { return y.view({b, t, heads_, d}).transpose(1, 2); };
    torch::Tensor q = split(parts[0]), k = split(parts[1]), v = split(parts[2]);
    torch::Tensor att = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(d));
    // On the input's device: a host mask next to device scores fails there, as on CUDA.
    torch::Tensor mask = torch::ones({t, t}, x.options().dtype(torch::kBool)).triu(1);
    // -inf, not a large negative number: it must fit fp16 and bf16 too.
    att = torch::softmax(att.masked_fill(mask, -std::numeric_limits<float>::infinity()), -1);
    torch::Tensor y = torch::matmul(att, v).transpose(1, 2).reshape({b, t, c});
    x = x + proj->forward(y);
    return x + out->forward(torch::gelu(fc->forward(ln2->forward(x))));
  }
  int64_t heads_;
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  torch::nn::Linear qkv{nullptr}, proj{nullptr}, fc{nullptr}, out{nullptr};
};
TORCH_MODULE(Block);

struct TinyTransformerImpl : torch::nn::Module {
  static constexpr int64_t kIn = 5, kWidth = 12, kHeads = 3, kOut = 3;
  TinyTransformerImpl() {
    frozen = register_module("frozen", torch::nn::Linear(kIn, kIn));
    embed = register_module("embed", torch::nn::Linear(kIn, kWidth));
    block0 = register_module("block0", Block(kWidth, kHeads));
    block1 = register_module("block1", Block(kWidth, kHeads));
    ln_f = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kWidth})));
    head = register_module("head", torch::nn::Linear(kWidth, kOut));
    for (auto& p : frozen->parameters()) p.set_requires_grad(false);
  }
  // x: (B, T, 5) -> (B, 3)
  torch::Tensor forward(torch::Tensor x) {
    x = embed->forward(frozen->forward(x));
    x = zt::call_unit(*block0, x);
    x = zt::call_unit(*block1, x);
    return head->forward(ln_f->forward(x).mean(1));
  }
  torch::nn::Linear frozen{nullptr}, embed{nullptr}, head{nullptr};
  Block block0{nullptr}, block1{nullptr};
  torch::nn::LayerNorm ln_f{nullptr};
};
TORCH_MODULE(TinyTransformer);

}  // namespace zt::testing
