#include "testdevice/device_guard.h"

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include "testdevice/stream_order.h"
#include "testdevice/test_device.h"

namespace zt::testdevice {
namespace {

thread_local c10::DeviceIndex tls_current_device = 0;
// Per thread, the current stream of each device; 0 is the default stream.
thread_local std::array<c10::StreamId, kDeviceCount> tls_current_streams{};

// Ids kStreamPoolSize+1 and up are the streams of getNewStream, never reused; every id below
// next_new_stream has been handed out (on some device: ids are not per device).
std::atomic<c10::StreamId> next_new_stream{kStreamPoolSize + 1};
std::array<std::atomic<uint32_t>, kDeviceCount> pool_counters{};

// What a recorded event points to (void* in the interface): its device, whether it times, and
// when it was last recorded: the time, the stream, and that stream's queue position then (the
// copies queued before it are what waiting for the event waits for, stream_order.h).
struct GuardEvent {
  c10::DeviceIndex device;
  c10::EventFlag flag;
  std::chrono::steady_clock::time_point recorded_at;
  c10::StreamId stream = 0;
  uint64_t position = 0;
};

c10::Stream stream_of(const GuardEvent& event) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kDeviceType, event.device), event.stream);
}

// Runs the copies an event waits for; an event never recorded is a null pointer: nothing.
void complete_event(void* event) {
  if (event == nullptr) return;
  const auto* state = static_cast<const GuardEvent*>(event);
  complete(stream_of(*state), state->position);
}

c10::Device device_of(c10::DeviceIndex index) {
  return c10::Device(kDeviceType, index);
}

// A device as the interface passes it: index -1 means the current device.
c10::DeviceIndex resolve(const c10::Device& device) {
  TORCH_CHECK(device.type() == kDeviceType, "zttest: expected a zttest device, got ", device);
  const c10::DeviceIndex index = device.has_index() ? device.index() : current_device();
  check_device_index(index);
  return index;
}

class DeviceGuardImpl final : public c10::impl::DeviceGuardImplInterface {
 public:
  c10::DeviceType type() const override { return kDeviceType; }

  c10::Device exchangeDevice(c10::Device device) const override {
    const c10::DeviceIndex index = resolve(device);
    const c10::DeviceIndex previous = current_device();
    set_current_device(index);
    return device_of(previous);
  }
  c10::Device getDevice() const override { return device_of(current_device()); }
  void setDevice(c10::Device device) const override { set_current_device(resolve(device)); }
  void uncheckedSetDevice(c10::Device device) const noexcept override {
    if (device.type() == kDeviceType && device.index() >= 0 && device.index() < kDeviceCount) {
      tls_current_device = device.index();
    }
  }
  c10::DeviceIndex deviceCount() const noexcept override { return kDeviceCount; }

  c10::Stream getStream(c10::Device device) const override {
    const c10::DeviceIndex index = resolve(device);
    return c10::Stream(c10::Stream::UNSAFE, device_of(index), tls_current_streams[index]);
  }
  c10::Stream getDefaultStream(c10::Device device) const override {
    return c10::Stream(c10::Stream::DEFAULT, device_of(resolve(device)));
  }
  c10::Stream getStreamFromGlobalPool(c10::Device device, bool /*high_priority*/) const override {
    const c10::DeviceIndex index = resolve(device);
    const auto slot = pool_counters[index].fetch_add(1) % static_cast<uint32_t>(kStreamPoolSize);
    return c10::Stream(c10::Stream::UNSAFE, device_of(index), 1 + slot);
  }
  c10::Stream getNewStream(c10::Device device, int /*priority*/) const override {
    return c10::Stream(c10::Stream::UNSAFE, device_of(resolve(device)), next_new_stream++);
  }
  c10::Stream exchangeStream(c10::Stream stream) const override {
    check_stream(stream);
    const c10::DeviceIndex index = stream.device_index();
    const c10::StreamId previous = tls_current_streams[index];
    tls_current_streams[index] = stream.id();
    return c10::Stream(c10::Stream::UNSAFE, device_of(index), previous);
  }
  // Queued copies run when their stream is asked about or waited for: it is then idle.
  bool queryStream(const c10::Stream& stream) const override {
    complete(stream);
    return true;
  }
  void synchronizeStream(const c10::Stream& stream) const override { complete(stream); }
  void synchronizeDevice(c10::DeviceIndex index) const override { complete_device(index); }
  // No caching allocator to tell: memory is freed when its last tensor goes.
  void recordDataPtrOnStream(const c10::DataPtr& /*data*/,
                             const c10::Stream& stream) const override {
    check_stream(stream);
  }

  void record(void** event, const c10::Stream& stream, c10::DeviceIndex device_index,
              c10::EventFlag flag) const override {
    // CUDA's check and wording (CUDAGuardImpl::record).
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(), "Event device index ",
                static_cast<int>(device_index), " does not match recording stream's device index ",
                static_cast<int>(stream.device_index()), ".");
    check_stream(stream);
    auto* state = static_cast<GuardEvent*>(*event);
    if (state == nullptr) {
      state = new GuardEvent{stream.device_index(), flag, {}};
      *event = state;
    }
    TORCH_CHECK(state->device == stream.device_index(), "zttest: event of device ",
                static_cast<int>(state->device), " recorded on a stream of device ",
                static_cast<int>(stream.device_index()));
    state->recorded_at = std::chrono::steady_clock::now();
    state->stream = stream.id();
    state->position = queue_position(stream);
  }
  void block(void* event, const c10::Stream& stream) const override {
    check_stream(stream);
    complete_event(event);
  }
  bool queryEvent(void* event) const override {
    complete_event(event);
    return true;
  }
  void synchronizeEvent(void* event) const override { complete_event(event); }
  void destroyEvent(void* event, c10::DeviceIndex /*device_index*/) const noexcept override {
    delete static_cast<GuardEvent*>(event);
  }
  double elapsedTime(void* start, void* end, c10::DeviceIndex device_index) const override {
    TORCH_CHECK(start != nullptr && end != nullptr,
                "Both events must be recorded before calculating elapsed time.");
    const auto* a = static_cast<const GuardEvent*>(start);
    const auto* b = static_cast<const GuardEvent*>(end);
    TORCH_CHECK(a->device == device_index && b->device == device_index,
                "zttest: elapsedTime of events recorded on devices ", static_cast<int>(a->device),
                " and ", static_cast<int>(b->device), ", asked on device ",
                static_cast<int>(device_index));
    // CUDA refuses events created without timing (cudaEventDisableTiming, PyTorch's default).
    TORCH_CHECK(
        a->flag == c10::EventFlag::BACKEND_DEFAULT && b->flag == c10::EventFlag::BACKEND_DEFAULT,
        "zttest: elapsedTime needs events created with timing enabled "
        "(EventFlag::BACKEND_DEFAULT)");
    return std::chrono::duration<double, std::milli>(b->recorded_at - a->recorded_at).count();
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, DeviceGuardImpl)

}  // namespace

c10::DeviceIndex current_device() {
  return tls_current_device;
}

void set_current_device(c10::DeviceIndex index) {
  check_device_index(index);
  tls_current_device = index;
}

c10::Stream current_stream(c10::DeviceIndex device) {
  check_device_index(device);
  return c10::Stream(c10::Stream::UNSAFE, device_of(device), tls_current_streams[device]);
}

void check_device_index(c10::DeviceIndex index) {
  TORCH_CHECK(index >= 0 && index < kDeviceCount, "zttest: invalid device index ",
              static_cast<int>(index), " (", kDeviceCount, " devices)");
}

void check_stream(const c10::Stream& stream) {
  TORCH_CHECK(stream.device_type() == kDeviceType, "zttest: expected a zttest stream, got ",
              stream);
  check_device_index(stream.device_index());
  TORCH_CHECK(stream.id() >= 0 && stream.id() < next_new_stream.load(),
              "zttest: no stream with id ", stream.id(), " exists");
}

}  // namespace zt::testdevice
