#pragma once
// Where a training program runs: the one parse of every program's --device option (and of the
// Python front door's module device), so each program and the package take the same values.
//
//   ""  or "auto"   this rank's GPU (cuda:<cuda_device_for_rank>, parallel/env.h) where the CUDA
//                   plugin sees one, else the CPU
//   "cpu"
//   "cuda"          cuda:<cuda_device_for_rank>: local rank r takes GPU r (torchrun's LOCAL_RANK)
//   "cuda:N"        that GPU (an error when this process sees fewer than N + 1)
//   "zttest"        the host-backed test device (testdevice/test_device.h), loaded from
//   "zttest:N"      libzt_testdevice.so on first use: local rank r takes device r % its count
//
// A bad value is one zt::Error naming it and the accepted forms.
//
// check_one_rank_per_device: collective over `comm`. Two ranks of one machine on the same device
// fail with one line naming both (NCCL refuses it, gloo would let them race silently). Whether two
// ranks' "cuda:0" are the same GPU depends on what each was made to see: the device's identity is
// its index with the rank's CUDA_VISIBLE_DEVICES, so per-rank visible lists tell apart what
// equal indices alone cannot.

#include <string>

#include <c10/core/Device.h>

#include "parallel/communicator.h"
#include "parallel/env.h"

namespace zt {

// The device type name the test device registers (PrivateUse1 renamed).
inline constexpr const char* kTestDeviceName = "zttest";

c10::Device resolve_device(const std::string& spec, const dist::Env& env);

// Loads the test device's library (ZT_TESTDEVICE_LIBRARY, else libzt_testdevice.so beside this
// library) once; returns how many devices it has. A zt::Error when it cannot be loaded.
int load_test_device();

void check_one_rank_per_device(dist::Communicator& comm, const c10::Device& device);

}  // namespace zt
