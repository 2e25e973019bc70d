// Views of zttest tensors share the base's memory, as on a GPU: zerotorch writes parameters through
// views of flat buffers, and a view that copied would silently lose the writes. A view op without
// a kernel is refused rather than copied.

#include <functional>
#include <string>
#include <vector>

#include <ATen/core/dispatch/Dispatcher.h>
#include <gtest/gtest.h>
#include <torch/library.h>
#include <torch/torch.h>

#include "device_fixture.h"

// A view op with a CPU kernel only: what a LibTorch view op without a zttest kernel looks like to
// the device.
TORCH_LIBRARY(zttest_check, m) {
  m.def("alias_of(Tensor(a) self) -> Tensor(a)");
}
TORCH_LIBRARY_IMPL(zttest_check, CPU, m) {
  m.impl("alias_of", [](const at::Tensor& self) { return self.alias(); });
}

namespace zt::testdevice {
namespace {

class Views : public DeviceTest {};

struct ViewCase {
  std::string name;
  std::function<at::Tensor(const at::Tensor&)> view;  // of a contiguous (4, 6) base
};

std::vector<ViewCase> view_cases() {
  using torch::indexing::None;
  using torch::indexing::Slice;
  return {
      {"narrow", [](const at::Tensor& b) { return b.narrow(1, 1, 3); }},
      {"view",
       [](const at::Tensor& b) {
         return b.view({6, 4});
       }},
      {"reshape",
       [](const at::Tensor& b) {
         return b.reshape({2, 12});
       }},
      {"select", [](const at::Tensor& b) { return b.select(0, 2); }},
      {"as_strided",
       [](const at::Tensor& b) {
         return b.as_strided({3, 2}, {1, 7}, 2);
       }},
      {"t", [](const at::Tensor& b) { return b.t(); }},
      {"transpose",
       [](const at::Tensor& b) {
         return b.view({2, 2, 6}).transpose(0, 2);
       }},
      {"permute",
       [](const at::Tensor& b) {
         return b.view({2, 3, 4}).permute({2, 0, 1});
       }},
      {"unsqueeze", [](const at::Tensor& b) { return b.unsqueeze(1); }},
      {"squeeze",
       [](const at::Tensor& b) {
         return b.view({4, 1, 6}).squeeze(1);
       }},
      {"flatten", [](const at::Tensor& b) { return b.flatten(); }},
      {"split", [](const at::Tensor& b) { return b.split(2, 1)[1]; }},
      {"chunk", [](const at::Tensor& b) { return b.chunk(2, 0)[1]; }},
      {"unfold", [](const at::Tensor& b) { return b.flatten().unfold(0, 4, 5); }},
      {"diagonal", [](const at::Tensor& b) { return b.diagonal(1); }},
      {"slice",
       [](const at::Tensor& b) {
         return b.index({Slice(1, 4, 2), Slice(None, None, 3)});
       }},
      {"view_as_complex",
       [](const at::Tensor& b) {
         return torch::view_as_real(torch::view_as_complex(b.view({4, 3, 2})));
       }},
  };
}

// Each view, written in place (through the CPU fallback, and through zttest's own fill and copy
// kernels), changes the base exactly as the same view of a host tensor changes its base.
TEST_F(Views, WritesThroughEveryViewReachTheBase) {
  for (const ViewCase& c : view_cases()) {
    at::Tensor host = torch::arange(24, torch::kFloat).view({4, 6});
    at::Tensor base = host.to(dev());
    at::Tensor hv = c.view(host);
    at::Tensor dv = c.view(base);
    EXPECT_TRUE(dv.is_alias_of(base)) << c.name;
    EXPECT_EQ(dv.device(), dev()) << c.name;
    hv.mul_(-2).add_(0.5);  // add_ and mul_ run on the fallback
    dv.mul_(-2).add_(0.5);
    EXPECT_TRUE(torch::equal(base.cpu(), host)) << c.name;
    hv.select(-1, 0).fill_(100);
    dv.select(-1, 0).fill_(100);
    EXPECT_TRUE(torch::equal(base.cpu(), host)) << c.name;
    hv.copy_(torch::full(hv.sizes(), 3.0f));
    dv.copy_(torch::full(dv.sizes(), 3.0f));
    EXPECT_TRUE(torch::equal(base.cpu(), host)) << c.name;
    hv.zero_();
    dv.zero_();
    EXPECT_TRUE(torch::equal(base.cpu(), host)) << c.name;
  }
}

// Ops whose in-place form has no zttest kernel run on the fallback, which writes the host result
// back into the device tensor, here a strided view, and into every tensor of a list.
TEST_F(Views, InPlaceOpsOnTheFallbackWriteBackIntoViews) {
  at::Tensor host = torch::arange(24, torch::kFloat).view({4, 6});
  at::Tensor base = host.to(dev());
  const auto apply = [](const at::Tensor& b) {
    at::Tensor v = b.t();
    v.masked_fill_(v > 10, -1.0f);
    v.narrow(0, 1, 2).index_fill_(1, torch::tensor({0, 3}, v.options().dtype(torch::kLong)), 7.0f);
    std::vector<at::Tensor> rows = b.unbind(0);
    at::_foreach_mul_(rows, 3.0);
    at::_foreach_add_(rows, rows);
  };
  apply(host);
  apply(base);
  EXPECT_TRUE(torch::equal(base.cpu(), host));
}

TEST_F(Views, ExpandedViewsSeeWritesToTheBase) {
  at::Tensor base = torch::zeros({1, 6}, dev());
  const at::Tensor wide = base.expand({4, 6});
  EXPECT_TRUE(wide.is_alias_of(base));
  base.fill_(2);
  EXPECT_TRUE(torch::equal(wide.cpu(), torch::full({4, 6}, 2.0f)));
}

TEST_F(Views, AViewOpWithoutAKernelIsRefused) {
  const at::Tensor a = torch::ones({4}, dev());
  const auto op = c10::Dispatcher::singleton()
                      .findSchemaOrThrow("zttest_check::alias_of", "")
                      .typed<at::Tensor(const at::Tensor&)>();
  EXPECT_TRUE(op.call(torch::ones({4})).defined());  // fine on the host
  expect_error([&] { (void)op.call(a); },
               "zttest: view op zttest_check::alias_of has no kernel; the CPU fallback would "
               "copy it");
  // The one ATen view op left to the fallback in LibTorch 2.11.
  expect_error(
      [&] {
        (void)at::_nested_view_from_buffer(
            a, torch::ones({1, 1}, torch::TensorOptions().dtype(torch::kLong).device(dev())),
            torch::ones({1, 1}, torch::TensorOptions().dtype(torch::kLong).device(dev())),
            torch::zeros({1}, torch::TensorOptions().dtype(torch::kLong).device(dev())));
      },
      "zttest: view op aten::_nested_view_from_buffer has no kernel");
}

}  // namespace
}  // namespace zt::testdevice
