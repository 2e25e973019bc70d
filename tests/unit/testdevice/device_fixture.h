#pragma once
// What every test of the zttest device shares: the device loaded once per binary (the binary does
// not link it, as no zerotorch program does), zttest:i, and the check of an error's wording.

#include <string>

#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include "testdevice/test_device.h"

namespace zt::testdevice {

class DeviceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { load_test_device(std::getenv(kLibraryEnv)); }
  static c10::Device dev(c10::DeviceIndex index = 0) { return test_device(index); }
};

// Expects fn() to throw a c10::Error whose message contains `part`.
template <typename Fn>
void expect_error(Fn&& fn, const std::string& part) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one containing: " << part;
  } catch (const c10::Error& e) {
    const std::string message = e.what_without_backtrace();
    EXPECT_NE(message.find(part), std::string::npos) << message;
  }
}

}  // namespace zt::testdevice
