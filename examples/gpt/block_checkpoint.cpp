#include "examples/gpt/block_checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>

#include "examples/gpt/gpt_block.h"

namespace zt::examples {
namespace {

class BlockCheckpoint : public torch::autograd::Function<BlockCheckpoint> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x,
                               torch::Tensor mask, int64_t block_address) {
    ctx->saved_data["block"] = block_address;
    ctx->saved_data["rng"] = at::detail::getDefaultCPUGenerator().get_state();
    ctx->saved_data["mask"] = mask;
    ctx->save_for_backward({x});
    auto* block = reinterpret_cast<GptBlockImpl*>(block_address);
    return block->forward_impl(x, mask);  // grad mode is off inside Function::forward
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* block = reinterpret_cast<GptBlockImpl*>(ctx->saved_data["block"].toInt());
    torch::Tensor x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    torch::Tensor mask = ctx->saved_data["mask"].toTensor();
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    at::Tensor rng_now = gen.get_state();
    gen.set_state(ctx->saved_data["rng"].toTensor());
    torch::Tensor y;
    {
      torch::AutoGradMode grad_on(true);
      y = block->forward_impl(x, mask);
    }
    gen.set_state(rng_now);
    // Parameter gradients accumulate through their AccumulateGrad nodes (and the engine's
    // post-accumulate hooks) inside this nested backward.
    torch::autograd::backward({y}, {grads[0]});
    return {x.grad(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor checkpoint_block(GptBlockImpl& block, const torch::Tensor& x,
                               const torch::Tensor& mask) {
  return BlockCheckpoint::apply(x, mask, reinterpret_cast<int64_t>(&block));
}

}  // namespace zt::examples
