#include "models/tiled_mlp.h"

#include <algorithm>
#include <vector>

#include <torch/autograd.h>

#include "base/error.h"

namespace zt::models {
namespace {

std::vector<torch::Tensor> trainable(torch::nn::Module& module) {
  std::vector<torch::Tensor> out;
  for (const torch::Tensor& p : module.parameters()) {
    if (p.requires_grad()) out.push_back(p);
  }
  return out;
}

template <typename T>
T* pointer(torch::autograd::AutogradContext* ctx, const char* key) {
  return reinterpret_cast<T*>(static_cast<intptr_t>(ctx->saved_data[key].toInt()));
}

// Inputs: x, the module, its trainable parameters (flattened by autograd: one gradient each),
// fn, tile. Only x is saved: the parameters are read from the module again in the backward, where
// a stage-3 unit holds them gathered.
struct TiledPositions : torch::autograd::Function<TiledPositions> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               torch::nn::Module* module, at::TensorList /*params*/,
                               const PositionwiseFn* fn, int64_t tile) {
    ctx->save_for_backward({x});
    ctx->saved_data["module"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(module));
    ctx->saved_data["fn"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(fn));
    ctx->saved_data["tile"] = tile;
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> parts;
    for (int64_t begin = 0; begin < x.size(1); begin += tile) {
      parts.push_back((*fn)(x.narrow(1, begin, std::min(tile, x.size(1) - begin))));
    }
    return torch::cat(parts, 1);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const torch::Tensor x = ctx->get_saved_variables()[0];
    torch::nn::Module& module = *pointer<torch::nn::Module>(ctx, "module");
    const PositionwiseFn& fn = *pointer<const PositionwiseFn>(ctx, "fn");
    const int64_t tile = ctx->saved_data["tile"].toInt();
    const std::vector<torch::Tensor> params = trainable(module);
    torch::Tensor grad_x = torch::empty_like(x);
    std::vector<torch::Tensor> sums;
    for (const torch::Tensor& p : params) {
      sums.push_back(torch::zeros(p.sizes(), p.options().dtype(torch::kFloat)));
    }
    for (int64_t begin = 0; begin < x.size(1); begin += tile) {
      const int64_t n = std::min(tile, x.size(1) - begin);
      torch::AutoGradMode grad_mode(true);
      const torch::Tensor xt = x.narrow(1, begin, n).detach().requires_grad_(true);
      const torch::Tensor out = fn(xt);
      std::vector<torch::Tensor> inputs{xt};
      inputs.insert(inputs.end(), params.begin(), params.end());
      const auto g = torch::autograd::grad({out}, inputs, {grads[0].narrow(1, begin, n)},
                                           /*retain_graph=*/false, /*create_graph=*/false,
                                           /*allow_unused=*/true);
      grad_x.narrow(1, begin, n).copy_(g[0]);
      for (size_t i = 0; i < params.size(); ++i) {
        if (g[i + 1].defined()) sums[i].add_(g[i + 1]);
      }
    }
    torch::autograd::variable_list out{grad_x, torch::Tensor()};
    for (size_t i = 0; i < params.size(); ++i) out.push_back(sums[i].to(params[i].scalar_type()));
    out.push_back(torch::Tensor());
    out.push_back(torch::Tensor());
    return out;
  }
};

}  // namespace

torch::Tensor tiled_over_positions(torch::nn::Module& module, const PositionwiseFn& fn,
                                   const torch::Tensor& x, int64_t tile) {
  ZT_CHECK(tile >= 1, "tiled MLP: tile must be >= 1 positions, got ", tile);
  ZT_CHECK(x.dim() == 3, "tiled MLP: input (B, T, C) expected, got ", x.sizes());
  if (!torch::GradMode::is_enabled() || tile >= x.size(1)) return fn(x);
  const std::vector<torch::Tensor> params = trainable(module);
  return TiledPositions::apply(x, &module, at::TensorList(params), &fn, tile);
}

}  // namespace zt::models
