// A small model trained on zttest:0 ends bit for bit where the same training on the host ends:
// the device runs the host's kernels, so anything else is a bug of the device (or of what is
// being tested on it). Autograd's backward runs on the device's thread, as on a GPU.

#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "device_fixture.h"

namespace zt::testdevice {
namespace {

class Training : public DeviceTest {};

struct MlpImpl : torch::nn::Module {
  MlpImpl()
      : fc1(register_module("fc1", torch::nn::Linear(16, 32))),
        norm(register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({32})))),
        fc2(register_module("fc2", torch::nn::Linear(32, 5))) {}
  at::Tensor forward(const at::Tensor& x) { return fc2(norm(torch::gelu(fc1(x)))); }
  torch::nn::Linear fc1;
  torch::nn::LayerNorm norm;
  torch::nn::Linear fc2;
};
TORCH_MODULE(Mlp);

// The parameters after 5 AdamW steps on `device`, back on the host.
std::vector<at::Tensor> train(c10::Device device) {
  torch::manual_seed(1234);
  Mlp model;
  model->to(device);
  const at::Tensor x = torch::randn({8, 16}).to(device);
  const at::Tensor y = torch::randint(0, 5, {8}).to(device);
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
  for (int step = 0; step < 5; ++step) {
    opt.zero_grad();
    const at::Tensor loss = torch::nn::functional::cross_entropy(model(x), y);
    loss.backward();
    opt.step();
  }
  std::vector<at::Tensor> out;
  for (const at::Tensor& p : model->parameters()) {
    EXPECT_EQ(p.device(), device);
    EXPECT_EQ(p.grad().device(), device);
    out.push_back(p.detach().cpu());
  }
  return out;
}

TEST_F(Training, AdamWOnTheDeviceMatchesTheHostBitForBit) {
  const std::vector<at::Tensor> host = train(torch::kCPU);
  const std::vector<at::Tensor> device = train(dev());
  ASSERT_EQ(host.size(), device.size());
  for (size_t i = 0; i < host.size(); ++i) {
    EXPECT_TRUE(torch::equal(host[i], device[i])) << "parameter " << i;
  }
}

TEST_F(Training, BackwardOnTheSecondDevice) {
  const at::Tensor w =
      torch::randn({4, 3}, torch::TensorOptions().device(dev(1))).requires_grad_(true);
  const at::Tensor x = torch::randn({2, 4}).to(dev(1));
  torch::mm(x, w).pow(2).sum().backward();
  EXPECT_EQ(w.grad().device(), dev(1));
  const at::Tensor w_host = w.detach().cpu().requires_grad_(true);
  torch::mm(x.cpu(), w_host).pow(2).sum().backward();
  EXPECT_TRUE(torch::equal(w.grad().cpu(), w_host.grad()));
}

}  // namespace
}  // namespace zt::testdevice
