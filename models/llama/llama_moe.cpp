#include "models/llama/llama_moe.h"

#include <algorithm>

#include "base/error.h"
#include "parallel/expert_exchange.h"

namespace zt::models {

MoeExpertsImpl::MoeExpertsImpl(int64_t experts, int64_t hidden, int64_t intermediate)
    : num_experts_(experts) {
  gate_up_proj =
      register_parameter("gate_up_proj", torch::empty({experts, 2 * intermediate, hidden}));
  down_proj = register_parameter("down_proj", torch::empty({experts, hidden, intermediate}));
}

void MoeExpertsImpl::set_expert_parallel(std::shared_ptr<dist::Communicator> group) {
  if (!group || group->size() == 1) return;
  ZT_CHECK(!ep_, "llama: the experts are already dealt over an expert group");
  const int64_t ep = group->size(), per = num_experts_ / ep;
  ZT_CHECK(num_experts_ % ep == 0, "expert_parallel.autoep_size ", ep, " does not divide the ",
           num_experts_, " experts of a layer");
  torch::NoGradGuard no_grad;
  for (torch::Tensor* p : {&gate_up_proj, &down_proj}) {
    p->set_data(p->narrow(0, group->rank() * per, per).clone());
  }
  ep_ = std::move(group);
}

torch::Tensor MoeExpertsImpl::expert(int64_t local, const torch::Tensor& rows) const {
  const std::vector<torch::Tensor> gate_up = at::linear(rows, gate_up_proj[local]).chunk(2, -1);
  return at::linear(torch::silu(gate_up[0]) * gate_up[1], down_proj[local]);
}

// Each rank's rows for rank j, expert by expert in ascending order (each expert's in the order
// forward takes them), padded to the longest such run in the group, go out in one exchange; rank
// j runs each of its experts over the rows every rank sent it, in rank order, and the outputs go
// back in the same places. Every local expert runs, on no rows where none came, so its
// parameters are in the graph on every rank whatever the routing.
torch::Tensor MoeExpertsImpl::forward_exchanged(const torch::Tensor& x, const torch::Tensor& index,
                                                const torch::Tensor& weight) {
  const int64_t ep = ep_->size(), me = ep_->rank(), per = num_experts_ / ep;
  std::vector<torch::Tensor> tokens(static_cast<size_t>(num_experts_)),
      ranks(static_cast<size_t>(num_experts_));
  std::vector<int64_t> mine(static_cast<size_t>(num_experts_), 0);
  {
    torch::NoGradGuard no_grad;
    tokens_ = torch::bincount(index.reshape({-1}), {}, num_experts_);
    const torch::Tensor counts = tokens_.cpu();
    for (int64_t e = 0; e < num_experts_; ++e) {
      mine[static_cast<size_t>(e)] = counts[e].item<int64_t>();
      if (mine[static_cast<size_t>(e)] == 0) continue;
      const torch::Tensor rank_token = index.eq(e).t().nonzero();  // (m, 2), rank-major
      ranks[static_cast<size_t>(e)] = rank_token.select(1, 0);
      tokens[static_cast<size_t>(e)] = rank_token.select(1, 1);
    }
  }
  const std::vector<std::vector<int64_t>> counts = dist::gather_expert_counts(mine, *ep_);
  // What source s sends rank j: its rows for j's experts.
  auto run = [&](int64_t s, int64_t j) {
    int64_t n = 0;
    for (int64_t e = j * per; e < (j + 1) * per; ++e) n += counts[s][e];
    return n;
  };
  int64_t longest = 1;  // never an empty exchange
  for (int64_t s = 0; s < ep; ++s)
    for (int64_t j = 0; j < ep; ++j) longest = std::max(longest, run(s, j));
  const int64_t c = x.size(-1);
  auto padding = [&](int64_t rows) { return torch::zeros({longest - rows, c}, x.options()); };
  std::vector<torch::Tensor> out_chunks;
  for (int64_t j = 0; j < ep; ++j) {
    std::vector<torch::Tensor> parts;
    for (int64_t e = j * per; e < (j + 1) * per; ++e) {
      if (mine[static_cast<size_t>(e)] > 0) {
        parts.push_back(x.index_select(0, tokens[static_cast<size_t>(e)]));
      }
    }
    parts.push_back(padding(run(me, j)));
    out_chunks.push_back(torch::cat(parts));
  }
  const torch::Tensor arrived = dist::exchange_rows(torch::cat(out_chunks), *ep_);
  // Each local expert over its rows from every source, then the outputs in the arrival places.
  std::vector<std::vector<torch::Tensor>> back(static_cast<size_t>(ep));
  std::vector<int64_t> at(static_cast<size_t>(ep), 0);
  for (int64_t l = 0; l < per; ++l) {
    const int64_t e = me * per + l;
    std::vector<torch::Tensor> rows;
    for (int64_t s = 0; s < ep; ++s) {
      rows.push_back(arrived.narrow(0, s * longest + at[s], counts[s][e]));
    }
    const torch::Tensor y = expert(l, torch::cat(rows));
    int64_t first = 0;
    for (int64_t s = 0; s < ep; ++s) {
      back[s].push_back(y.narrow(0, first, counts[s][e]));
      first += counts[s][e];
      at[s] += counts[s][e];
    }
  }
  std::vector<torch::Tensor> back_chunks;
  for (int64_t s = 0; s < ep; ++s) {
    back[s].push_back(padding(at[s]));
    back_chunks.push_back(torch::cat(back[s]));
  }
  const torch::Tensor returned = dist::exchange_rows(torch::cat(back_chunks), *ep_);
  torch::Tensor out = torch::zeros_like(x);
  for (int64_t j = 0; j < ep; ++j) {
    int64_t first = j * longest;
    for (int64_t e = j * per; e < (j + 1) * per; ++e) {
      const int64_t m = mine[static_cast<size_t>(e)];
      if (m == 0) continue;
      const torch::Tensor& token = tokens[static_cast<size_t>(e)];
      torch::Tensor y = returned.narrow(0, first, m);
      y = y * weight.index({token, ranks[static_cast<size_t>(e)]}).unsqueeze(-1);
      out.index_add_(0, token, y.to(out.scalar_type()));
      first += m;
    }
  }
  return out;
}

torch::Tensor MoeExpertsImpl::forward(const torch::Tensor& x, const torch::Tensor& index,
                                      const torch::Tensor& weight) {
  if (ep_) return forward_exchanged(x, index, weight);
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
    torch::Tensor y = expert(e, x.index_select(0, token));
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
