#include "parallel/tensor_parallel.h"

#include <cstdint>

#include <torch/autograd.h>

#include "base/error.h"

namespace zt::dist {
namespace {

at::Tensor summed(const at::Tensor& x, Communicator& group) {
  at::Tensor y = x.contiguous().clone();
  group.all_reduce(y)->wait();
  return y;
}

Communicator* group_of(torch::autograd::AutogradContext* ctx) {
  return reinterpret_cast<Communicator*>(static_cast<intptr_t>(ctx->saved_data["group"].toInt()));
}

// `group` outlives the graph: it is the topology's, held by the engine and the model.
struct EnterTensorGroup : torch::autograd::Function<EnterTensorGroup> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            Communicator* group) {
    ctx->saved_data["group"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(group));
    return x.view_as(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return {summed(grads[0], *group_of(ctx)), at::Tensor()};
  }
};

struct LeaveTensorGroup : torch::autograd::Function<LeaveTensorGroup> {
  static at::Tensor forward(torch::autograd::AutogradContext* /*ctx*/, const at::Tensor& x,
                            Communicator* group) {
    return summed(x, *group);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* /*ctx*/,
                                                 torch::autograd::variable_list grads) {
    return {grads[0], at::Tensor()};
  }
};

}  // namespace

at::Tensor enter_tensor_group(const at::Tensor& x, Communicator& group) {
  if (group.size() == 1) return x;
  return EnterTensorGroup::apply(x, &group);
}

at::Tensor leave_tensor_group(const at::Tensor& x, Communicator& group) {
  if (group.size() == 1) return x;
  return LeaveTensorGroup::apply(x, &group);
}

void check_same_on_group(const at::Tensor& t, Communicator& group, const char* what) {
  if (group.size() == 1) return;
  const at::Tensor flat = t.detach().to(at::kCPU, at::kLong).contiguous().view(-1);
  // Integer arithmetic wraps the same way on every rank, so equal inputs give equal sums.
  const at::Tensor weights = at::arange(1, flat.numel() + 1, flat.options());
  const int64_t sum = flat.numel() == 0 ? 0 : (flat * weights).sum().item<int64_t>();
  const auto opts = at::TensorOptions().dtype(at::kLong);
  at::Tensor hi =
      at::tensor({t.dim(), static_cast<int64_t>(t.numel()), sum}, opts).to(group.device());
  at::Tensor lo = hi.clone();
  group.all_reduce(hi, ReduceOp::kMax)->wait();
  group.all_reduce(lo, ReduceOp::kMin)->wait();
  ZT_CHECK(at::equal(hi.cpu(), lo.cpu()), "tensor parallelism: the ", what, " differ across the ",
           group.size(), " ranks of a tensor group (rank ", group.rank(),
           " of it); every rank of a tensor group must read the same batch");
}

}  // namespace zt::dist
