// The pool of host memory a CPU model's ZeRO step reuses (core/zero/host_buffer_pool.h).

#include <c10/core/CPUAllocator.h>
#include <gtest/gtest.h>

#include "core/zero/host_buffer_pool.h"

namespace {

using zt::zero::HostBufferPool;

constexpr size_t kMiB = size_t{1} << 20;

void expect_within_peak(const HostBufferPool& pool) {
  const HostBufferPool::Stats s = pool.stats();
  EXPECT_LE(s.live_bytes + s.idle_bytes, s.peak_live_bytes);
}

TEST(HostBufferPool, HandsBackTheSameBlockForTheSameSize) {
  HostBufferPool pool;
  c10::Allocator& cpu = *c10::GetCPUAllocator();
  at::DataPtr a = pool.take(3 * kMiB, cpu);
  void* first = a.get();
  pool.give(std::move(a), 3 * kMiB);
  EXPECT_EQ(pool.stats().idle_bytes, 3 * kMiB);
  at::DataPtr b = pool.take(3 * kMiB, cpu);
  EXPECT_EQ(b.get(), first);
  HostBufferPool::Stats s = pool.stats();
  EXPECT_EQ(s.allocations, 1);
  EXPECT_EQ(s.reuses, 1);
  EXPECT_EQ(s.live_bytes, 3 * kMiB);
  EXPECT_EQ(s.idle_bytes, 0u);
  // Another size is a new block; the idle one of 3 MiB does not serve it.
  pool.give(std::move(b), 3 * kMiB);
  at::DataPtr c = pool.take(2 * kMiB, cpu);
  EXPECT_NE(c.get(), nullptr);
  EXPECT_EQ(pool.stats().allocations, 2);
  expect_within_peak(pool);
  pool.give(std::move(c), 2 * kMiB);
  expect_within_peak(pool);
}

TEST(HostBufferPool, NeverHoldsMoreThanItsBuffersNeededAtOnce) {
  HostBufferPool pool;
  c10::Allocator& cpu = *c10::GetCPUAllocator();
  at::DataPtr a = pool.take(4 * kMiB, cpu), b = pool.take(4 * kMiB, cpu);
  EXPECT_EQ(pool.stats().peak_live_bytes, 8 * kMiB);
  pool.give(std::move(a), 4 * kMiB);
  pool.give(std::move(b), 4 * kMiB);
  EXPECT_EQ(pool.stats().idle_bytes, 8 * kMiB);
  // 6 MiB fits no idle block: taking it frees idle blocks until live + idle is within the peak.
  at::DataPtr c = pool.take(6 * kMiB, cpu);
  HostBufferPool::Stats s = pool.stats();
  EXPECT_EQ(s.peak_live_bytes, 8 * kMiB);
  EXPECT_EQ(s.live_bytes, 6 * kMiB);
  EXPECT_EQ(s.idle_bytes, 0u);
  expect_within_peak(pool);
  pool.give(std::move(c), 6 * kMiB);
  EXPECT_EQ(pool.stats().idle_bytes, 6 * kMiB);
  // An empty pointer changes nothing; a block the pool did not hand out is freed, not kept.
  pool.give(at::DataPtr(), 0);
  pool.give(cpu.allocate(6 * kMiB), 6 * kMiB);
  s = pool.stats();
  EXPECT_EQ(s.idle_bytes, 6 * kMiB);
  EXPECT_EQ(s.live_bytes, 0u);
}

TEST(HostBufferPool, TrimFreesEveryIdleBlock) {
  HostBufferPool pool;
  c10::Allocator& cpu = *c10::GetCPUAllocator();
  at::DataPtr a = pool.take(kMiB, cpu), b = pool.take(2 * kMiB, cpu);
  pool.give(std::move(a), kMiB);
  pool.trim();  // a live block stays live
  HostBufferPool::Stats s = pool.stats();
  EXPECT_EQ(s.idle_bytes, 0u);
  EXPECT_EQ(s.live_bytes, 2 * kMiB);
  pool.give(std::move(b), 2 * kMiB);
  EXPECT_EQ(pool.stats().idle_bytes, 2 * kMiB);
  pool.trim();
  EXPECT_EQ(pool.stats().idle_bytes, 0u);
  at::DataPtr c = pool.take(2 * kMiB, cpu);  // nothing left to reuse
  s = pool.stats();
  EXPECT_EQ(s.allocations, 3);
  EXPECT_EQ(s.reuses, 0);
  pool.give(std::move(c), 2 * kMiB);
}

}  // namespace
