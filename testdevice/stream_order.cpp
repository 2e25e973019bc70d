#include "testdevice/stream_order.h"

#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <utility>

#include <c10/util/Exception.h>

#include "testdevice/device_guard.h"

namespace zt::testdevice {
namespace {

// The bytes a tensor's elements span, [begin, end); empty for no elements.
struct Span {
  uintptr_t begin = 0;
  uintptr_t end = 0;
  bool overlaps(const Span& o) const { return begin < o.end && o.begin < end; }
};

Span span_of(const at::Tensor& t) {
  if (t.numel() == 0) return {};
  int64_t low = 0;
  int64_t high = 0;
  for (int64_t d = 0; d < t.dim(); ++d) {
    const int64_t reach = (t.size(d) - 1) * t.stride(d);
    (reach < 0 ? low : high) += reach;
  }
  const auto base = reinterpret_cast<uintptr_t>(t.const_data_ptr());
  const auto item = static_cast<int64_t>(t.element_size());
  return {base + static_cast<uintptr_t>(low * item),
          base + static_cast<uintptr_t>((high + 1) * item)};
}

struct Pending {
  uint64_t position = 0;
  Span reads;
  Span writes;
  std::function<void()> run;  // holds the tensors
};

struct Queue {
  uint64_t next = 0;  // the position of the next copy queued
  std::deque<Pending> items;
};

using Key = std::pair<c10::DeviceIndex, c10::StreamId>;

// Recursive: a copy's tensors are dropped while the queues are locked, and dropping the last
// reference frees memory, whose allocator calls complete_touching.
std::recursive_mutex& queues_mutex() {
  static auto* mutex = new std::recursive_mutex();  // leaked: frees may come after static teardown
  return *mutex;
}
std::map<Key, Queue>& queues() {
  static auto* all = new std::map<Key, Queue>();
  return *all;
}

Key key_of(const c10::Stream& stream) {
  check_stream(stream);
  return {stream.device_index(), stream.id()};
}

void run_until(Queue& queue, uint64_t upto) {
  while (!queue.items.empty() && queue.items.front().position < upto) {
    Pending item = std::move(queue.items.front());
    queue.items.pop_front();
    item.run();
  }
}

void poison(const at::Tensor& t) {
  if (t.is_floating_point() || t.is_complex()) {
    t.fill_(std::numeric_limits<double>::quiet_NaN());
  } else if (t.scalar_type() == at::kBool) {
    t.fill_(true);
  } else {
    t.fill_(-1);
  }
}

}  // namespace

void enqueue_copy(const c10::Stream& stream, const at::Tensor& host_dst, const at::Tensor& host_src,
                  const at::Tensor& keep_dst, const at::Tensor& keep_src) {
  const Key key = key_of(stream);
  const std::lock_guard<std::recursive_mutex> lock(queues_mutex());
  Queue& queue = queues()[key];
  const Span writes = span_of(host_dst);
  // A copy queued earlier on this stream that still has to read these bytes runs first: the
  // poison below must not reach it (on a GPU it runs before this copy, in stream order).
  for (const Pending& item : queue.items) {
    if (item.reads.overlaps(writes)) {
      run_until(queue, UINT64_MAX);
      break;
    }
  }
  poison(host_dst);
  Pending item;
  item.position = queue.next++;
  item.reads = span_of(host_src);
  item.writes = writes;
  item.run = [host_dst, host_src, keep_dst, keep_src]() mutable { host_dst.copy_(host_src); };
  queue.items.push_back(std::move(item));
}

void complete(const c10::Stream& stream, uint64_t upto) {
  const Key key = key_of(stream);
  const std::lock_guard<std::recursive_mutex> lock(queues_mutex());
  auto it = queues().find(key);
  if (it != queues().end()) run_until(it->second, upto);
}

void complete_device(c10::DeviceIndex device) {
  check_device_index(device);
  const std::lock_guard<std::recursive_mutex> lock(queues_mutex());
  for (auto& [key, queue] : queues()) {
    if (key.first == device) run_until(queue, UINT64_MAX);
  }
}

uint64_t queue_position(const c10::Stream& stream) {
  const Key key = key_of(stream);
  const std::lock_guard<std::recursive_mutex> lock(queues_mutex());
  return queues()[key].next;
}

void complete_touching(const void* ptr, size_t nbytes) {
  const auto begin = reinterpret_cast<uintptr_t>(ptr);
  const Span freed{begin, begin + nbytes};
  const std::lock_guard<std::recursive_mutex> lock(queues_mutex());
  for (auto& [key, queue] : queues()) {
    uint64_t last = 0;
    bool found = false;
    for (const Pending& item : queue.items) {
      if (item.reads.overlaps(freed) || item.writes.overlaps(freed)) {
        last = item.position;
        found = true;
      }
    }
    if (found) run_until(queue, last + 1);
  }
}

}  // namespace zt::testdevice
