#include "testdevice/pinned_allocator.h"

#include "testdevice/host_blocks.h"

namespace zt::testdevice {
namespace {

HostBlocks& pinned_blocks() {
  static auto* blocks = new HostBlocks();  // leaked: storages may be freed after static teardown
  return *blocks;
}

void free_pinned_memory(void* ptr) {
  pinned_blocks().release(ptr);
}

class PinnedAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    const c10::Device cpu(c10::DeviceType::CPU);
    if (nbytes == 0) {
      return c10::DataPtr(nullptr, nullptr, nullptr, cpu);
    }
    void* ptr = pinned_blocks().allocate(nbytes, /*owner=*/-1, "zttest pinned host allocator");
    return c10::DataPtr(ptr, ptr, &free_pinned_memory, cpu);
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_pinned_memory; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

}  // namespace

c10::Allocator* pinned_allocator() {
  static auto* allocator = new PinnedAllocator();
  return allocator;
}

bool is_pinned_pointer(const void* p) {
  return p != nullptr && pinned_blocks().find(p);
}

}  // namespace zt::testdevice
