// The loading path of the zttest device, as a program that wants it takes it: this program does
// not link libzt_testdevice.so, knows nothing of "zttest" until it loads it with
// load_test_device(), and then has the device. Exit status 0 when all holds, 1 (with the reason)
// otherwise.

#include <cstdio>
#include <string>

#include <torch/torch.h>

#include "testdevice/test_device.h"

namespace {

int failures = 0;

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "load_smoke: %s\n", what);
    ++failures;
  }
}

// Whether fn throws a c10::Error whose message contains `part`.
template <typename Fn>
bool throws(Fn&& fn, const std::string& part) {
  try {
    fn();
  } catch (const c10::Error& e) {
    return std::string(e.what_without_backtrace()).find(part) != std::string::npos;
  }
  return false;
}

}  // namespace

int main() {
  namespace td = zt::testdevice;
  check(!td::test_device_loaded(), "the library is loaded before load_test_device");
  check(throws([] { (void)c10::Device("zttest:0"); }, "zttest"),
        "\"zttest:0\" parses before the device is loaded");
  check(throws([] { td::load_test_device("/nonexistent/libzt_testdevice.so"); }, "cannot load"),
        "a wrong path loads");
  td::load_test_device(std::getenv(td::kLibraryEnv));
  td::load_test_device(std::getenv(td::kLibraryEnv));  // a second call does nothing
  check(td::test_device_loaded(), "the library is not loaded after load_test_device");
  check(c10::Device("zttest:1") == td::test_device(1), "\"zttest:1\" does not parse");
  {
    const at::Tensor a = torch::ones({256}, c10::Device("zttest:1"));
    check(td::memory_allocated(1) >= 1024, "zttest:1 memory is not counted");
    check(throws([&] { (void)(a + torch::ones({256})); },
                 "Expected all tensors to be on the same device, but found at least two devices, "
                 "zttest:1 and cpu!"),
          "a host tensor is accepted by a device op");
    check((a * 2).sum().item<float>() == 512.0f, "a device op computes wrong");
  }
  check(td::memory_allocated(1) == 0, "zttest:1 memory is not freed");
  if (failures == 0) {
    std::printf("load_smoke: the test device loads and works\n");
  }
  return failures == 0 ? 0 : 1;
}
