#include "parallel/expert_exchange.h"

#include <torch/autograd.h>

#include "base/error.h"

namespace zt::dist {
namespace {

at::Tensor all_to_all_rows(const at::Tensor& x, Communicator& group) {
  ZT_CHECK(x.dim() >= 1 && x.size(0) % group.size() == 0, "expert exchange: ", x.size(0),
           " rows do not split into ", group.size(), " equal chunks");
  at::Tensor send = x.contiguous();
  at::Tensor recv = at::empty_like(send);
  at::Tensor send_flat = send.view({-1}), recv_flat = recv.view({-1});
  group.all_to_all(send_flat, recv_flat)->wait();
  return recv;
}

struct ExpertAllToAll : torch::autograd::Function<ExpertAllToAll> {
  // `group` outlives the graph: it is the topology's, held by the engine and the model.
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            Communicator* group) {
    ctx->saved_data["group"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(group));
    return all_to_all_rows(x, *group);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* group =
        reinterpret_cast<Communicator*>(static_cast<intptr_t>(ctx->saved_data["group"].toInt()));
    return {all_to_all_rows(grads[0], *group), at::Tensor()};
  }
};

}  // namespace

at::Tensor exchange_rows(const at::Tensor& x, Communicator& group) {
  return ExpertAllToAll::apply(x, &group);
}

std::vector<std::vector<int64_t>> gather_expert_counts(const std::vector<int64_t>& mine,
                                                       Communicator& group) {
  const int64_t n = static_cast<int64_t>(mine.size()), parts = group.size();
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(parts));
  at::Tensor send = at::tensor(mine, at::TensorOptions().dtype(at::kLong)).to(group.device());
  at::Tensor recv = at::empty({parts * n}, send.options());
  group.all_gather(send, recv)->wait();
  const at::Tensor all = recv.cpu().contiguous();
  const int64_t* v = all.data_ptr<int64_t>();
  for (int64_t s = 0; s < parts; ++s)
    out[static_cast<size_t>(s)].assign(v + s * n, v + (s + 1) * n);
  return out;
}

}  // namespace zt::dist
