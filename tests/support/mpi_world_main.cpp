#include <chrono>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "parallel/dist.h"
#include "tests/support/mpi_world.h"

namespace zt::testing {

std::shared_ptr<dist::Communicator>& mpi_world() {
  static std::shared_ptr<dist::Communicator> world;
  return world;
}

}  // namespace zt::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  zt::dist::CommOptions options;
  options.backend = zt::dist::Backend::kMpi;
  options.timeout = std::chrono::seconds(120);
  auto& world = zt::testing::mpi_world();
  world = zt::dist::create_communicator(options);
  int rc = RUN_ALL_TESTS();
  // Every rank must agree: a failure on any rank fails all.
  torch::Tensor bad = torch::full({1}, rc != 0 ? 1 : 0, torch::kInt);
  world->all_reduce(bad, zt::dist::ReduceOp::kMax)->wait();
  rc = bad.item<int>();
  world.reset();
  return rc;
}
