#include "train/device.h"

#include <cstdlib>
#include <dlfcn.h>
#include <functional>
#include <mutex>
#include <unistd.h>

#include <ATen/ATen.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include "base/env_vars.h"
#include "base/error.h"
#include "parallel/nccl_communicator.h"

namespace zt {
namespace {

constexpr const char* kForms = "auto, cpu, cuda, cuda:N, zttest or zttest:N";

// The folder of the library holding this function (libzt_train.so in a build or an install).
std::string this_library_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&load_test_device), &info) == 0 || info.dli_fname == nullptr)
    return ".";
  const std::string path = info.dli_fname;
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

int cuda_count_or_zero() {
  try {
    return dist::cuda_device_count();
  } catch (const std::exception&) {  // no plugin in this build, or no driver
    return 0;
  }
}

c10::Device cuda_device(const dist::Env& env) {
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(
                                     dist::cuda_device_for_rank(env, cuda_count_or_zero())));
}

}  // namespace

int load_test_device() {
  static std::once_flag once;
  static std::string error;
  std::call_once(once, [] {
    const char* given = ::zt::env::get(env::kTestDeviceLib);
    const std::string path = given != nullptr && *given != '\0'
                                 ? std::string(given)
                                 : this_library_dir() + "/libzt_testdevice.so";
    if (dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE) == nullptr) {
      const char* why = dlerror();
      error = std::string("the test device's library ") + path + " cannot be loaded (" +
              (why != nullptr ? why : "unknown reason") +
              "); build the tests (ZT_BUILD_TESTS) or set " + env::kTestDeviceLib;
    }
  });
  ZT_CHECK(error.empty(), error);
  ZT_CHECK(c10::get_privateuse1_backend() == kTestDeviceName,
           "the test device's library loaded, but PrivateUse1 is registered as '",
           c10::get_privateuse1_backend(), "'");
  return static_cast<int>(c10::impl::VirtualGuardImpl(c10::DeviceType::PrivateUse1).deviceCount());
}

c10::Device resolve_device(const std::string& spec, const dist::Env& env) {
  if (spec.empty() || spec == "auto") {
    return cuda_count_or_zero() > 0 ? cuda_device(env) : c10::Device(c10::kCPU);
  }
  if (spec == "cpu") return c10::Device(c10::kCPU);
  if (spec == "cuda") {
    ZT_CHECK(cuda_count_or_zero() > 0, "--device cuda: no CUDA device is visible to ",
             env.describe());
    return cuda_device(env);
  }
  const std::string test = kTestDeviceName;
  if (spec == test || spec.rfind(test + ":", 0) == 0) {
    const int count = load_test_device();
    if (spec == test) {
      return c10::Device(c10::DeviceType::PrivateUse1,
                         static_cast<c10::DeviceIndex>(env.local_rank % count));
    }
  }
  c10::Device d(c10::kCPU);
  try {
    d = c10::Device(spec);
  } catch (const std::exception&) {
    ZT_THROW("--device '", spec, "' is not a device: use ", kForms);
  }
  ZT_CHECK(d.is_cpu() || d.is_cuda() || d.is_privateuseone(), "--device '", spec,
           "' is not a device zerotorch trains on: use ", kForms);
  if (d.is_cuda()) {
    const int n = cuda_count_or_zero();
    ZT_CHECK(d.has_index() && d.index() < n, "--device ", spec, ": ", env.describe(), " sees ", n,
             " CUDA device(s)");
  }
  if (d.is_privateuseone()) {
    const int n = static_cast<int>(c10::impl::VirtualGuardImpl(d.type()).deviceCount());
    ZT_CHECK(d.has_index() && d.index() < n, "--device ", spec, ": the test device has ", n,
             " device(s)");
  }
  return d;
}

void check_one_rank_per_device(dist::Communicator& comm, const c10::Device& device) {
  if (comm.size() == 1 || device.is_cpu()) return;
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  std::string visible;
  if (device.is_cuda()) {
    const char* v = ::zt::env::get(env::kCudaVisibleDevices);
    visible = v != nullptr ? v : "(all)";
  }
  const std::string identity = std::string(host) + "|" + device.str() + "|" + visible;
  // Hashes of (machine, device) from every rank; equal pairs are one device shared. std::hash
  // of a string is the same in every process of one build.
  const auto h = [](const std::string& s) {
    return static_cast<int64_t>(std::hash<std::string>{}(s)&0x7fffffffffffffffULL);
  };
  at::Tensor mine = at::tensor({h(host), h(identity)}, at::kLong).to(comm.device());
  at::Tensor all = at::empty({2 * comm.size()}, mine.options());
  comm.all_gather(mine, all)->wait();
  all = all.cpu();
  const int64_t* a = all.data_ptr<int64_t>();
  // Every rank finds the same first pair, so every rank stops with the same line.
  for (int r = 0; r < comm.size(); ++r) {
    for (int q = r + 1; q < comm.size(); ++q) {
      if (a[2 * r + 1] != a[2 * q + 1]) continue;
      const bool me = comm.rank() == r || comm.rank() == q;
      ZT_THROW("ranks ", r, " and ", q, " train on one device",
               me ? " (" + device.str() +
                        (visible.empty() ? "" : " with CUDA_VISIBLE_DEVICES=" + visible) + ")"
                  : std::string(),
               ": give each rank its own device (one rank per GPU, or a CUDA_VISIBLE_DEVICES per "
               "rank)");
    }
  }
}

}  // namespace zt
