#include "base/logging.h"

#include <cstdlib>

#include <gtest/gtest.h>

namespace {

std::string capture(const std::function<void()>& fn) {
  testing::internal::CaptureStderr();
  fn();
  return testing::internal::GetCapturedStderr();
}

TEST(Logging, InfoPrintsOnRankZeroWithRankPrefix) {
  zt::set_process_rank(0);
  ::unsetenv("ZT_LOG_LEVEL");
  ::unsetenv("ZT_LOG_ALL_RANKS");
  zt::log::reload_from_environment();
  std::string out = capture([] { ZT_LOG_INFO("step ", 5, " loss ", 1.5); });
  EXPECT_NE(out.find("[zt r0 I "), std::string::npos) << out;
  EXPECT_NE(out.find("step 5 loss 1.5"), std::string::npos) << out;
}

TEST(Logging, InfoIsSilentOnOtherRanksButWarningsAreNot) {
  zt::set_process_rank(1);
  ::unsetenv("ZT_LOG_ALL_RANKS");
  zt::log::reload_from_environment();
  EXPECT_EQ(capture([] { ZT_LOG_INFO("hidden"); }), "");
  EXPECT_NE(capture([] { ZT_LOG_WARN("shown"); }).find("[zt r1 W "), std::string::npos);
  ::setenv("ZT_LOG_ALL_RANKS", "1", 1);
  zt::log::reload_from_environment();
  EXPECT_NE(capture([] { ZT_LOG_INFO("now shown"); }).find("now shown"), std::string::npos);
  ::unsetenv("ZT_LOG_ALL_RANKS");
  zt::set_process_rank(-1);
  zt::log::reload_from_environment();
}

TEST(Logging, LevelFromEnvironment) {
  zt::set_process_rank(0);
  ::setenv("ZT_LOG_LEVEL", "error", 1);
  zt::log::reload_from_environment();
  EXPECT_EQ(capture([] { ZT_LOG_WARN("quiet"); }), "");
  ::setenv("ZT_LOG_LEVEL", "debug", 1);
  zt::log::reload_from_environment();
  EXPECT_NE(capture([] { ZT_LOG_DEBUG("loud"); }).find("loud"), std::string::npos);
  ::unsetenv("ZT_LOG_LEVEL");
  zt::log::reload_from_environment();
  zt::set_process_rank(-1);
}

TEST(Logging, BadLevelIsAClearError) {
  try {
    zt::log::parse_level("verbose");
    FAIL();
  } catch (const zt::Error& e) {
    EXPECT_NE(e.message().find("ZT_LOG_LEVEL"), std::string::npos);
    EXPECT_NE(e.message().find("'verbose'"), std::string::npos);
  }
}

}  // namespace
