#include "models/llama/llama_layers.h"

#include <cmath>

#include "base/error.h"
#include "models/checkpointed_forward.h"
#include "models/llama/llama_moe.h"
#include "parallel/sequence_exchange.h"
#include "parallel/tensor_parallel.h"

namespace zt::models {

RmsNormImpl::RmsNormImpl(int64_t dim, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RmsNormImpl::forward(const torch::Tensor& x) {
  torch::Tensor xf = x.to(torch::kFloat);
  torch::Tensor y = xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps_);
  return weight * y.to(x.scalar_type());
}

torch::Tensor rope_inverse_frequencies(const LlamaShape& s) {
  const int64_t d = s.head_dim;
  // 1 / theta^(2i/d), in fp32 from int64 exponents, as transformers computes it.
  torch::Tensor inv =
      1.0 / torch::pow(s.rope_theta, torch::arange(0, d, 2, torch::kLong).to(torch::kFloat) / d);
  const RopeScaling& r = s.rope_scaling;
  if (r.type == "default") return inv;
  if (r.type == "linear") return inv / r.factor;
  ZT_CHECK(r.type == "llama3", "llama: rope_scaling type '", r.type,
           "' is not computed (default, linear and llama3 are)");
  // Wavelengths longer than the original context / low_freq_factor are stretched by `factor`,
  // shorter than context / high_freq_factor kept, and the band between interpolated.
  const double old_len = static_cast<double>(r.original_max_position_embeddings);
  const double low_wavelen = old_len / r.low_freq_factor;
  const double high_wavelen = old_len / r.high_freq_factor;
  torch::Tensor wavelen = 2 * M_PI / inv;
  torch::Tensor scaled = torch::where(wavelen > low_wavelen, inv / r.factor, inv);
  torch::Tensor smooth =
      (old_len / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
  torch::Tensor smoothed = (1 - smooth) * scaled / r.factor + smooth * scaled;
  torch::Tensor medium = wavelen.ge(high_wavelen) & wavelen.le(low_wavelen);
  return torch::where(medium, smoothed, scaled);
}

std::pair<torch::Tensor, torch::Tensor> rope_cos_sin(const torch::Tensor& inv_freq, int64_t t,
                                                     torch::ScalarType dtype) {
  torch::Tensor pos = torch::arange(t, inv_freq.options());
  torch::Tensor freqs = torch::outer(pos, inv_freq);  // (T, D/2)
  torch::Tensor emb = torch::cat({freqs, freqs}, -1).unsqueeze(0);
  return {emb.cos().to(dtype), emb.sin().to(dtype)};
}

namespace {

// (x1, x2) -> (-x2, x1) over the last dimension's halves.
torch::Tensor rotate_half(const torch::Tensor& x) {
  const int64_t h = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, h, h), x.narrow(-1, 0, h)}, -1);
}

torch::nn::Linear linear(int64_t in, int64_t out, bool bias) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias));
}

// Keeps slice `index` along `dim` of a parameter whose extent splits into `groups` equal groups
// dealt out as dist::split_sizes does (a copy: the rest is freed).
void keep_part(torch::Tensor& p, int64_t dim, int64_t index, int64_t parts, int64_t groups) {
  if (!p.defined()) return;
  torch::NoGradGuard no_grad;
  const std::vector<int64_t> sizes = dist::split_sizes(p.size(dim), parts, groups);
  p.set_data(
      p.narrow(dim, dist::split_offset(sizes, static_cast<int>(index)), sizes[index]).clone());
}

// Output features of a column-split linear: its weight's rows and its bias.
void keep_rows(torch::nn::Linear& l, int64_t index, int64_t parts, int64_t groups) {
  keep_part(l->weight, 0, index, parts, groups);
  keep_part(l->bias, 0, index, parts, groups);
}

// The input of a column-split layer enters the group; the partial output of a row-split one
// leaves it summed, and its bias is added once, after the sum.
torch::Tensor enter(const torch::Tensor& x, const std::shared_ptr<const TensorSplit>& t) {
  return t ? dist::enter_tensor_group(x, *t->group) : x;
}

torch::Tensor row_split_out(torch::nn::Linear& l, const torch::Tensor& x,
                            const std::shared_ptr<const TensorSplit>& t) {
  if (!t) return l->forward(x);
  torch::Tensor y = dist::leave_tensor_group(at::linear(x, l->weight), *t->group);
  return l->bias.defined() ? y + l->bias : y;
}

}  // namespace

LlamaAttentionImpl::LlamaAttentionImpl(const LlamaShape& s)
    : heads_(s.num_attention_heads),
      kv_heads_(s.num_key_value_heads),
      head_dim_(s.head_dim),
      dropout_(s.attention_dropout) {
  q_proj = register_module("q_proj", linear(s.hidden_size, heads_ * head_dim_, s.qkv_bias));
  k_proj = register_module("k_proj", linear(s.hidden_size, kv_heads_ * head_dim_, s.qkv_bias));
  v_proj = register_module("v_proj", linear(s.hidden_size, kv_heads_ * head_dim_, s.qkv_bias));
  o_proj = register_module("o_proj", linear(heads_ * head_dim_, s.hidden_size, s.o_bias));
  if (s.qk_norm) {
    q_norm = register_module("q_norm", RmsNorm(head_dim_, s.rms_norm_eps));
    k_norm = register_module("k_norm", RmsNorm(head_dim_, s.rms_norm_eps));
  }
}

torch::Tensor LlamaAttentionImpl::per_head(const torch::Tensor& y, int64_t n, RmsNorm& norm) const {
  torch::Tensor h = y.view({y.size(0), y.size(1), n, head_dim_});
  return norm ? norm->forward(h) : h;
}

torch::Tensor LlamaAttentionImpl::attend(const torch::Tensor& q, const torch::Tensor& k,
                                         const torch::Tensor& v, const torch::Tensor& mask) {
  // q (B, Hq, T, D), k and v (B, Hkv, T, D). Query head h reads key/value head h / (Hq / Hkv), as
  // transformers' repeat_kv lays them out; SDPA's enable_gqa does the same without copying them.
  const double p = is_training() ? dropout_ : 0.0;
  const bool gqa = k.size(1) != q.size(1);
  return mask.defined()
             ? at::scaled_dot_product_attention(q, k, v, mask, p, false, std::nullopt, gqa)
             : at::scaled_dot_product_attention(q, k, v, {}, p, /*is_causal=*/true, std::nullopt,
                                                gqa);
}

torch::Tensor LlamaAttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& cos,
                                          const torch::Tensor& sin, const torch::Tensor& mask) {
  if (split_ && split_->parts() > 1) return split_forward(enter(x, tensor_), cos, sin, mask);
  const int64_t b = x.size(0), t = x.size(1);
  RmsNorm none{nullptr};
  const torch::Tensor in = enter(x, tensor_);
  torch::Tensor q = per_head(q_proj->forward(in), heads_, q_norm).transpose(1, 2);
  torch::Tensor k = per_head(k_proj->forward(in), kv_heads_, k_norm).transpose(1, 2);
  torch::Tensor v = per_head(v_proj->forward(in), kv_heads_, none).transpose(1, 2);
  const torch::Tensor c = cos.unsqueeze(1), s = sin.unsqueeze(1);
  q = q * c + rotate_half(q) * s;
  k = k * c + rotate_half(k) * s;
  torch::Tensor y = attend(q, k, v, mask);
  return project_out(y.transpose(1, 2).reshape({b, t, heads_ * head_dim_}));
}

torch::Tensor LlamaAttentionImpl::project_out(const torch::Tensor& y) {
  return row_split_out(o_proj, y, tensor_);
}

// Rotary embeddings at this rank's own positions (cos/sin are its slice), then the exchange: every
// position of H / sp query heads and of their key/value heads, attention as one process computes
// it for those heads, and back to this rank's positions of every head.
torch::Tensor LlamaAttentionImpl::split_forward(const torch::Tensor& x, const torch::Tensor& cos,
                                                const torch::Tensor& sin,
                                                const torch::Tensor& mask) {
  dist::Communicator& group = *split_->group;
  const int64_t sp = split_->parts();
  const int64_t b = x.size(0), t = x.size(1);
  const torch::Tensor c = cos.unsqueeze(2), s = sin.unsqueeze(2);  // (1, T/sp, 1, D)
  auto rotated = [&](const torch::Tensor& y, int64_t n, RmsNorm& norm) {
    torch::Tensor h = per_head(y, n, norm);  // (B, T/sp, n, D)
    return h * c + rotate_half(h) * s;
  };
  torch::Tensor q = rotated(q_proj->forward(x), heads_, q_norm);
  torch::Tensor k = rotated(k_proj->forward(x), kv_heads_, k_norm);
  torch::Tensor v = v_proj->forward(x).view({b, t, kv_heads_, head_dim_});
  if (kv_heads_ < sp) {
    // One key/value head per rank: head j serves query heads j * Hq/Hkv .. on ranks
    // j * sp/Hkv .. (j+1) * sp/Hkv - 1, each of which receives a copy.
    k = k.repeat_interleave(sp / kv_heads_, 2);
    v = v.repeat_interleave(sp / kv_heads_, 2);
  }
  // Uneven (q_per_rank_ set): rank r gets kv_per_rank_[r] whole key/value heads with their query
  // heads, as DeepSpeed's DistributedAttention splits a count the group does not divide.
  auto to_heads = [&](const torch::Tensor& y, const std::vector<int64_t>& counts) {
    return dist::sequence_to_heads(y, group, split_->wire, counts).transpose(1, 2);  // (B, n, T, D)
  };
  torch::Tensor y = attend(to_heads(q, q_per_rank_), to_heads(k, kv_per_rank_),
                           to_heads(v, kv_per_rank_), mask);  // (B, Hq/sp, T, D)
  y = dist::heads_to_sequence(y.transpose(1, 2).contiguous(), group, split_->wire, q_per_rank_);
  return project_out(y.reshape({b, t, heads_ * head_dim_}));
}

void LlamaAttentionImpl::set_sequence_split(std::shared_ptr<const SequenceSplit> split) {
  const int64_t sp = split ? split->parts() : 1;
  q_per_rank_.clear();
  kv_per_rank_.clear();
  if (kv_heads_ % sp != 0 && kv_heads_ > sp) {
    // Whole key/value heads (with their query heads) per rank, some ranks one more.
    kv_per_rank_ = dist::kv_heads_per_rank(kv_heads_, sp);
    for (int64_t n : kv_per_rank_) q_per_rank_.push_back(n * (heads_ / kv_heads_));
  } else {
    ZT_CHECK(kv_heads_ % sp == 0 || sp % kv_heads_ == 0, "sequence_parallel_size ", sp,
             ": the model's ", kv_heads_,
             " key/value heads are fewer than the ranks and do not divide them (each rank needs "
             "a whole or replicated key/value head)");
  }
  split_ = std::move(split);
}

void LlamaAttentionImpl::set_tensor_split(std::shared_ptr<const TensorSplit> split) {
  ZT_CHECK(!split_, "llama: split the tensors before the sequence");
  ZT_CHECK(!tensor_, "llama: the tensors are split already");
  const int64_t tp = split ? split->parts() : 1;
  if (tp == 1) return;
  // Each rank's q/k norm weights would collect gradients from its heads only.
  ZT_CHECK(!q_norm, "tensor_parallel.autotp_size ", tp,
           ": the q/k norms (Qwen3) are not computed under a tensor split");
  // Whole key/value heads with their query heads, as DeepSpeed's AutoTP deals them: a count the
  // group does not divide goes one more to the first ranks; fewer than the group would leave a
  // rank without attention.
  ZT_CHECK(kv_heads_ >= tp, "tensor_parallel.autotp_size ", tp, ": the model's ", kv_heads_,
           " key/value heads are fewer than the ranks (each rank keeps at least one whole head)");
  const int64_t r = split->index();
  const int64_t kv = kv_heads_;
  keep_rows(q_proj, r, tp, kv);
  keep_rows(k_proj, r, tp, kv);
  keep_rows(v_proj, r, tp, kv);
  keep_part(o_proj->weight, 1, r, tp, kv);
  heads_ = q_proj->weight.size(0) / head_dim_;
  kv_heads_ = k_proj->weight.size(0) / head_dim_;
  tensor_ = std::move(split);
}

LlamaMlpImpl::LlamaMlpImpl(const LlamaShape& s)
    : tile_(s.mlp_tile_tokens),
      whole_([this](const torch::Tensor& x) { return forward_whole(x); }) {
  gate_proj = register_module("gate_proj", linear(s.hidden_size, s.intermediate_size, s.mlp_bias));
  up_proj = register_module("up_proj", linear(s.hidden_size, s.intermediate_size, s.mlp_bias));
  down_proj = register_module("down_proj", linear(s.intermediate_size, s.hidden_size, s.mlp_bias));
}

torch::Tensor LlamaMlpImpl::forward(const torch::Tensor& x) {
  return tile_ > 0 ? tiled_over_positions(*this, whole_, x, tile_) : forward_whole(x);
}

torch::Tensor LlamaMlpImpl::forward_whole(const torch::Tensor& x) {
  const torch::Tensor in = enter(x, tensor_);
  return row_split_out(down_proj, torch::silu(gate_proj->forward(in)) * up_proj->forward(in),
                       tensor_);
}

void LlamaMlpImpl::set_tensor_split(std::shared_ptr<const TensorSplit> split) {
  ZT_CHECK(!tensor_, "llama: the tensors are split already");
  const int64_t tp = split ? split->parts() : 1;
  if (tp == 1) return;
  // Features one by one, the first ranks one more where tp does not divide them (DeepSpeed's
  // near-even MLP split at tp_grain_size 1).
  const int64_t inter = gate_proj->weight.size(0);
  ZT_CHECK(inter >= tp, "tensor_parallel.autotp_size ", tp, ": the model's intermediate_size ",
           inter, " is smaller than it");
  const int64_t r = split->index();
  keep_rows(gate_proj, r, tp, inter);
  keep_rows(up_proj, r, tp, inter);
  keep_part(down_proj->weight, 1, r, tp, inter);
  tensor_ = std::move(split);
}

LlamaDecoderLayerImpl::LlamaDecoderLayerImpl(const LlamaShape& s, int64_t index,
                                             std::shared_ptr<RouterStats> stats)
    : checkpoint_(s.activation_checkpointing) {
  self_attn = register_module("self_attn", LlamaAttention(s));
  if (s.moe.routes(index)) {
    moe = register_module("mlp", std::make_shared<SparseMoeBlockImpl>(s, std::move(stats)));
  } else {
    mlp = register_module("mlp", LlamaMlp(s));
  }
  input_layernorm = register_module("input_layernorm", RmsNorm(s.hidden_size, s.rms_norm_eps));
  post_attention_layernorm =
      register_module("post_attention_layernorm", RmsNorm(s.hidden_size, s.rms_norm_eps));
}

torch::Tensor LlamaDecoderLayerImpl::forward_impl(const torch::Tensor& x, const torch::Tensor& cos,
                                                  const torch::Tensor& sin,
                                                  const torch::Tensor& mask) {
  torch::Tensor h = x + self_attn->forward(input_layernorm->forward(x), cos, sin, mask);
  const torch::Tensor n = post_attention_layernorm->forward(h);
  return h + (moe ? moe->forward(n) : mlp->forward(n));
}

torch::Tensor LlamaDecoderLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& cos,
                                             const torch::Tensor& sin, const torch::Tensor& mask) {
  return checkpointed_forward(checkpoint_, *this,
                              [this](const std::vector<torch::Tensor>& in) {
                                return forward_impl(in[0], in[1], in[2], in[3]);
                              },
                              {x, cos, sin, mask});
}

}  // namespace zt::models
