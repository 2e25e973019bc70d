#include "base/error.h"

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

}  // namespace
