#include "models/llama/llama_moe.h"

#include <algorithm>

#include "base/error.h"
#include "models/llama/moe_capacity.h"
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

torch::Tensor MoeExpertsImpl::expert(const torch::Tensor& gate_up, const torch::Tensor& down,
                                     const torch::Tensor& rows) const {
  const std::vector<torch::Tensor> h = at::linear(rows, gate_up).chunk(2, -1);
  return at::linear(torch::silu(h[0]) * h[1], down);
}

// Each rank's rows for rank j, expert by expert in ascending order (each expert's in the order
// forward takes them), padded to the longest such run in the group, go out in one exchange; rank
// j runs each of its experts over the rows every rank sent it, in rank order, and the outputs go
// back in the same places. Every local expert runs, on no rows where none came, so its
// parameters are in the graph on every rank whatever the routing. The rows leave through one
// index_select and arrive as pieces of one split, so the backward adds each gradient once
// (padding rows repeat row 0 and receive a zero gradient: nobody reads them).
torch::Tensor MoeExpertsImpl::forward_exchanged(const torch::Tensor& x, const torch::Tensor& index,
                                                const torch::Tensor& weight) {
  const int64_t ep = ep_->size(), me = ep_->rank(), per = num_experts_ / ep;
  const auto e_at = [](int64_t e) { return static_cast<size_t>(e); };
  std::vector<int64_t> mine(e_at(num_experts_), 0);
  std::vector<torch::Tensor> token_of(e_at(num_experts_)), rank_of(e_at(num_experts_));
  torch::Tensor tokens;  // every routed row's token, expert by expert (on x's device)
  {
    torch::NoGradGuard no_grad;
    // Index E: a choice dropped by the capacity (moe_capacity.h), which no expert takes.
    tokens_ = torch::bincount(index.reshape({-1}), {}, num_experts_ + 1).narrow(0, 0, num_experts_);
    const torch::Tensor counts = tokens_.cpu();
    // (m, 2) [choice rank, token] per expert, rank-major: transformers' order.
    const torch::Tensor by_expert = index.cpu().t().contiguous();
    std::vector<torch::Tensor> all;
    for (int64_t e = 0; e < num_experts_; ++e) {
      mine[e_at(e)] = counts[e].item<int64_t>();
      if (mine[e_at(e)] == 0) continue;
      const torch::Tensor rank_token = by_expert.eq(e).nonzero();
      rank_of[e_at(e)] = rank_token.select(1, 0);
      token_of[e_at(e)] = rank_token.select(1, 1);
      all.push_back(token_of[e_at(e)]);
    }
    tokens = all.empty() ? torch::empty({0}, torch::kLong) : torch::cat(all);
  }
  const std::vector<std::vector<int64_t>> counts = dist::gather_expert_counts(mine, *ep_);
  // What source s sends rank j: its rows for j's experts.
  auto run = [&](int64_t s, int64_t j) {
    int64_t n = 0;
    for (int64_t e = j * per; e < (j + 1) * per; ++e) n += counts[s][e_at(e)];
    return n;
  };
  int64_t longest = 1;  // never an empty exchange
  for (int64_t s = 0; s < ep; ++s)
    for (int64_t j = 0; j < ep; ++j) longest = std::max(longest, run(s, j));
  torch::Tensor send_index = torch::zeros({ep * longest}, torch::kLong);
  {
    int64_t from = 0;
    for (int64_t j = 0; j < ep; ++j) {
      const int64_t n = run(me, j);
      send_index.narrow(0, j * longest, n).copy_(tokens.narrow(0, from, n));
      from += n;
    }
  }
  const torch::Tensor arrived =
      dist::exchange_rows(x.index_select(0, send_index.to(x.device())), *ep_);
  // Source s's chunk: its rows for each local expert, then padding.
  std::vector<int64_t> in_sizes;
  for (int64_t s = 0; s < ep; ++s) {
    for (int64_t l = 0; l < per; ++l) in_sizes.push_back(counts[s][e_at(me * per + l)]);
    in_sizes.push_back(longest - run(s, me));
  }
  const std::vector<torch::Tensor> in = arrived.split_with_sizes(in_sizes);
  std::vector<int64_t> received(static_cast<size_t>(per), 0);  // rows each local expert takes
  for (int64_t s = 0; s < ep; ++s)
    for (int64_t l = 0; l < per; ++l)
      received[static_cast<size_t>(l)] += counts[s][e_at(me * per + l)];
  const torch::Tensor outputs = call_routed_unit(*this, torch::tensor(received), [&] {
    std::vector<std::vector<torch::Tensor>> back(static_cast<size_t>(ep));
    const std::vector<torch::Tensor> gate_ups = gate_up_proj.unbind(0), downs = down_proj.unbind(0);
    for (int64_t l = 0; l < per; ++l) {
      std::vector<torch::Tensor> rows;
      std::vector<int64_t> from;
      for (int64_t s = 0; s < ep; ++s) {
        rows.push_back(in[static_cast<size_t>(s * (per + 1) + l)]);
        from.push_back(rows.back().size(0));
      }
      const std::vector<torch::Tensor> y =
          expert(gate_ups[static_cast<size_t>(l)], downs[static_cast<size_t>(l)], torch::cat(rows))
              .split_with_sizes(from);
      for (int64_t s = 0; s < ep; ++s)
        back[static_cast<size_t>(s)].push_back(y[static_cast<size_t>(s)]);
    }
    std::vector<torch::Tensor> back_chunks;
    for (int64_t s = 0; s < ep; ++s) {
      auto& pieces = back[static_cast<size_t>(s)];
      pieces.push_back(torch::zeros({longest - run(s, me), x.size(-1)}, x.options()));
      back_chunks.push_back(torch::cat(pieces));
    }
    return torch::cat(back_chunks);
  });
  const torch::Tensor returned = dist::exchange_rows(outputs, *ep_);
  // Rank j's chunk: this rank's rows for each of j's experts, then padding.
  std::vector<int64_t> out_sizes;
  for (int64_t j = 0; j < ep; ++j) {
    for (int64_t e = j * per; e < (j + 1) * per; ++e) out_sizes.push_back(mine[e_at(e)]);
    out_sizes.push_back(longest - run(me, j));
  }
  const std::vector<torch::Tensor> outs = returned.split_with_sizes(out_sizes);
  torch::Tensor out = torch::zeros_like(x);
  for (int64_t e = 0; e < num_experts_; ++e) {
    if (mine[e_at(e)] == 0) continue;
    const torch::Tensor token = token_of[e_at(e)].to(x.device());
    const torch::Tensor rank = rank_of[e_at(e)].to(x.device());
    torch::Tensor y = outs[static_cast<size_t>((e / per) * (per + 1) + e % per)];
    y = y * weight.index({token, rank}).unsqueeze(-1);
    out.index_add_(0, token, y.to(out.scalar_type()));
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
    // Index E: a choice dropped by the capacity (moe_capacity.h), which no expert takes.
    tokens_ = torch::bincount(index.reshape({-1}), {}, experts + 1).narrow(0, 0, experts);
    hit = tokens_.nonzero().reshape({-1}).cpu();
  }
  const int64_t* e_of = hit.data_ptr<int64_t>();
  return call_routed_unit(*this, tokens_, [&] {
    const std::vector<torch::Tensor> gate_ups = gate_up_proj.unbind(0), downs = down_proj.unbind(0);
    for (int64_t i = 0; i < hit.numel(); ++i) {
      const int64_t e = e_of[i];
      torch::Tensor rank_token;  // (m, 2): [choice rank, token], rank-major
      {
        torch::NoGradGuard no_grad;
        rank_token = index.eq(e).t().nonzero();
      }
      const torch::Tensor rank = rank_token.select(1, 0), token = rank_token.select(1, 1);
      torch::Tensor y = expert(gate_ups[static_cast<size_t>(e)], downs[static_cast<size_t>(e)],
                               x.index_select(0, token));
      y = y * weight.index({token, rank}).unsqueeze(-1);
      out.index_add_(0, token, y.to(out.scalar_type()));
    }
    return out;
  });
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
  const torch::Tensor probs = torch::softmax(logits.to(torch::kFloat), -1);
  auto [top, index] = torch::topk(probs, moe_.num_experts_per_tok, -1);
  const double factor = is_training() || moe_.eval_capacity_factor < 0 ? moe_.capacity_factor
                                                                       : moe_.eval_capacity_factor;
  if (factor > 0) {
    // DeepSpeed's capacity: its kept choices' weights are renormalised whatever norm_topk_prob.
    Routed kept =
        limit_capacity(probs, index,
                       expert_capacity(flat.size(0), moe_.num_experts, moe_.num_experts_per_tok,
                                       factor, moe_.min_capacity),
                       moe_.drop_policy);
    index = kept.index;
    top = kept.weight;
  } else if (moe_.norm_topk_prob) {
    top = top / top.sum(-1, /*keepdim=*/true);
  }
  if (!moe_.fp32_expert_weights) top = top.to(logits.scalar_type());
  if (stats_) stats_->add(logits, moe_.num_experts_per_tok);
  torch::Tensor out = experts->forward(flat, index, top);
  if (shared_expert) {
    out = out + torch::sigmoid(shared_expert_gate->forward(flat)) * shared_expert->forward(flat);
  }
  return out.view(x.sizes());
}

}  // namespace zt::models
