#include "models/llama/llama_moe.h"

#include "base/error.h"

namespace zt::models {

MoeExpertsImpl::MoeExpertsImpl(int64_t experts, int64_t hidden, int64_t intermediate) {
  gate_up_proj =
      register_parameter("gate_up_proj", torch::empty({experts, 2 * intermediate, hidden}));
  down_proj = register_parameter("down_proj", torch::empty({experts, hidden, intermediate}));
}

torch::Tensor MoeExpertsImpl::forward(const torch::Tensor& x, const torch::Tensor& index,
                                      const torch::Tensor& weight) {
  const int64_t experts = gate_up_proj.size(0);
  torch::Tensor out = torch::zeros_like(x);
  torch::Tensor hit;
  {
    torch::NoGradGuard no_grad;
    tokens_ = torch::bincount(index.reshape({-1}), {}, experts);
    hit = tokens_.nonzero().reshape({-1}).cpu();
  }
  const int64_t* e_of = hit.data_ptr<int64_t>();
  for (int64_t i = 0; i < hit.numel(); ++i) {
    const int64_t e = e_of[i];
    torch::Tensor rank_token;  // (m, 2): [choice rank, token], rank-major
    {
      torch::NoGradGuard no_grad;
      rank_token = index.eq(e).t().nonzero();
    }
    const torch::Tensor rank = rank_token.select(1, 0), token = rank_token.select(1, 1);
    const std::vector<torch::Tensor> gate_up =
        at::linear(x.index_select(0, token), gate_up_proj[e]).chunk(2, -1);
    torch::Tensor y = at::linear(torch::silu(gate_up[0]) * gate_up[1], down_proj[e]);
    y = y * weight.index({token, rank}).unsqueeze(-1);
    out.index_add_(0, token, y.to(out.scalar_type()));
  }
  return out;
}

MoeRouterImpl::MoeRouterImpl(int64_t experts, int64_t hidden) {
  weight = register_parameter("weight", torch::empty({experts, hidden}));
}

SparseMoeBlockImpl::SparseMoeBlockImpl(const LlamaShape& s, std::shared_ptr<RouterStats> stats)
    : moe_(s.moe), stats_(std::move(stats)) {
  ZT_CHECK(s.mlp_tile_tokens == 0, "model.mlp_tile_tokens: the tiled MLP is not computed for ",
           s.model_type, "'s routed layers (set it to 0)");
  gate = register_module("gate", MoeRouter(moe_.num_experts, s.hidden_size));
  experts = register_module("experts",
                            MoeExperts(moe_.num_experts, s.hidden_size, moe_.intermediate_size));
  if (moe_.shared_expert_intermediate_size > 0) {
    LlamaShape shared = s;
    shared.intermediate_size = moe_.shared_expert_intermediate_size;
    shared.mlp_bias = false;
    shared_expert = register_module("shared_expert", LlamaMlp(shared));
    shared_expert_gate =
        register_module("shared_expert_gate",
                        torch::nn::Linear(torch::nn::LinearOptions(s.hidden_size, 1).bias(false)));
  }
}

torch::Tensor SparseMoeBlockImpl::forward(const torch::Tensor& x) {
  const torch::Tensor flat = x.reshape({-1, x.size(-1)});       // (N, C)
  const torch::Tensor logits = at::linear(flat, gate->weight);  // (N, E), compute dtype
  auto [top, index] =
      torch::topk(torch::softmax(logits.to(torch::kFloat), -1), moe_.num_experts_per_tok, -1);
  if (moe_.norm_topk_prob) top = top / top.sum(-1, /*keepdim=*/true);
  if (!moe_.fp32_expert_weights) top = top.to(logits.scalar_type());
  if (stats_) stats_->add(logits, moe_.num_experts_per_tok);
  torch::Tensor out = experts->forward(flat, index, top);
  if (shared_expert) {
    out = out + torch::sigmoid(shared_expert_gate->forward(flat)) * shared_expert->forward(flat);
  }
  return out.view(x.sizes());
}

}  // namespace zt::models
