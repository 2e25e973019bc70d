#include "base/error.h"

#include <stdexcept>

#include <gtest/gtest.h>

#include "base/main_guard.h"

namespace {

int check_stage(int stage) {
  ZT_CHECK(stage >= 0 && stage <= 3, "zero_optimization.stage must be 0..3, got ", stage);
  return stage;
}

TEST(Error, CheckPassesThroughValidValues) {
  EXPECT_EQ(check_stage(2), 2);
}

TEST(Error, CheckNamesTheCulpritAndTheLocation) {
  zt::set_process_rank(3);
  try {
    check_stage(7);
    FAIL() << "no exception";
  } catch (const zt::Error& e) {
    EXPECT_EQ(e.message(), "zero_optimization.stage must be 0..3, got 7");
    EXPECT_EQ(e.kind(), zt::ErrorKind::kUser);
    EXPECT_EQ(e.rank(), 3);
    std::string what = e.what();
    EXPECT_NE(what.find("rank 3"), std::string::npos) << what;
    EXPECT_NE(what.find("error_test.cpp:"), std::string::npos) << what;
  }
  zt::set_process_rank(-1);
}

TEST(Error, InternalAssertIsMarkedInternal) {
  try {
    ZT_INTERNAL_ASSERT(1 + 1 == 3, "arithmetic");
    FAIL();
  } catch (const zt::Error& e) {
    EXPECT_EQ(e.kind(), zt::ErrorKind::kInternal);
    EXPECT_NE(e.message().find("1 + 1 == 3"), std::string::npos) << e.message();
  }
}

TEST(Error, RunMainTurnsExceptionsIntoOneLineAndExitOne) {
  testing::internal::CaptureStderr();
  int rc = zt::run_main("prog", []() -> int { ZT_THROW("bad shard file x.bin\nsecond line"); });
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, 1);
  EXPECT_EQ(err.rfind("prog: error: bad shard file x.bin", 0), 0u) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_EQ(zt::run_main("prog", [] { return 0; }), 0);
}

// What torch::jit::Module::forward throws for an error inside scripted code (LibTorch 2.11): the
// headline is the error itself, not the interpreter's preamble.
TEST(Error, TorchScriptErrorsAreHeadedByTheirLastLine) {
  const std::string scripted =
      "The following operation failed in the TorchScript interpreter.\n"
      "Traceback of TorchScript, serialized code (most recent call last):\n"
      "  File \"code/__torch__.py\", line 9, in forward\n"
      "    return torch.sum(torch.mm(x, y))\n"
      "                     ~~~~~~~~ <--- HERE\n"
      "RuntimeError: mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)\n";
  EXPECT_EQ(zt::error_headline(scripted),
            "RuntimeError: mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)");
  EXPECT_EQ(zt::error_headline("bad shard file x.bin\nsecond line"), "bad shard file x.bin");
  EXPECT_EQ(zt::error_headline("one line"), "one line");
  testing::internal::CaptureStderr();
  EXPECT_EQ(zt::run_main("prog", [&]() -> int { throw std::runtime_error(scripted); }), 1);
  EXPECT_EQ(testing::internal::GetCapturedStderr(),
            "prog: error: RuntimeError: mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)\n");
}

}  // namespace
