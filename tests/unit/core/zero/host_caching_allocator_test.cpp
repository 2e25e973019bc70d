// The caching allocator a CPU engine installs for LibTorch's CPU tensors
// (core/zero/host_caching_allocator.h). It is process-wide: every test acquires and releases it,
// and compares statistics before and after, never absolute counts.

#include "core/zero/host_caching_allocator.h"

#include <cstdio>
#include <cstring>
#include <string>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>
#include <gtest/gtest.h>

namespace {

namespace zz = zt::zero;

constexpr size_t kMiB = size_t{1} << 20;

// A float tensor of `bytes` bytes from LibTorch's current CPU allocator.
at::Tensor bytes_tensor(size_t bytes) {
  return at::empty({static_cast<int64_t>(bytes / sizeof(float))}, at::kFloat);
}

// Holds the cache for one test; every idle block is freed first, so that blocks of earlier tests
// do not serve this one's requests.
class HostCache : public ::testing::Test {
 protected:
  void SetUp() override {
    previous_ = c10::GetCPUAllocator();
    zz::acquire_host_cache();
    zz::empty_host_cache();
  }
  void TearDown() override {
    zz::release_host_cache();
    EXPECT_EQ(c10::GetCPUAllocator(), previous_) << "the default allocator is back";
    EXPECT_EQ(zz::host_cache_stats().idle_bytes, 0u) << "the last holder frees the idle blocks";
  }
  c10::Allocator* previous_ = nullptr;
};

TEST(HostCacheClass, RoundsLargeRequestsUpToAnEighthOfTheirPowerOfTwo) {
  EXPECT_EQ(zz::host_cache_class(1000), 1000u) << "small requests are not rounded";
  EXPECT_EQ(zz::host_cache_class(zz::kHostCacheMinBytes), zz::kHostCacheMinBytes);
  EXPECT_EQ(zz::host_cache_class(zz::kHostCacheMinBytes + 1),
            zz::kHostCacheMinBytes + zz::kHostCacheMinBytes / 8);
  EXPECT_EQ(zz::host_cache_class(kMiB), kMiB);
  EXPECT_EQ(zz::host_cache_class(kMiB + 1), kMiB + kMiB / 8);
  EXPECT_EQ(zz::host_cache_class(2 * kMiB - 1), 2 * kMiB);
  for (size_t n = zz::kHostCacheMinBytes; n < 64 * kMiB; n = n * 9 / 7 + 4093) {
    const size_t c = zz::host_cache_class(n);
    EXPECT_GE(c, n);
    EXPECT_LE(c, n + n / 8) << n;
    EXPECT_EQ(zz::host_cache_class(c), c) << "a class is its own class";
  }
}

TEST_F(HostCache, IsLibTorchsCpuAllocatorWhileHeld) {
  EXPECT_TRUE(zz::host_cache_installed());
  EXPECT_NE(c10::GetCPUAllocator(), previous_);
  zz::acquire_host_cache();  // a second engine
  zz::release_host_cache();  // ... gone again: the first still holds it
  EXPECT_TRUE(zz::host_cache_installed());
  EXPECT_NE(c10::GetCPUAllocator(), previous_);
}

TEST_F(HostCache, HandsAFreedBlockToTheNextRequestOfItsClass) {
  const zz::HostCacheStats s0 = zz::host_cache_stats();
  void* first = nullptr;
  {
    at::Tensor t = bytes_tensor(3 * kMiB);
    first = t.data_ptr();
    t.fill_(1.0f);
  }
  const zz::HostCacheStats s1 = zz::host_cache_stats();
  EXPECT_EQ(s1.allocations, s0.allocations + 1);
  EXPECT_EQ(s1.idle_bytes, zz::host_cache_class(3 * kMiB));
  EXPECT_EQ(s1.live_bytes, s0.live_bytes);
  at::Tensor again = bytes_tensor(3 * kMiB - 4096);  // same class
  EXPECT_EQ(again.data_ptr(), first);
  const zz::HostCacheStats s2 = zz::host_cache_stats();
  EXPECT_EQ(s2.allocations, s1.allocations) << "nothing mapped";
  EXPECT_EQ(s2.reuses, s1.reuses + 1);
  EXPECT_EQ(s2.idle_bytes, 0u);
}

TEST_F(HostCache, ASmallerRequestTakesABlockAtMostTwiceItsClass) {
  void* big = nullptr;
  {
    at::Tensor t = bytes_tensor(4 * kMiB);
    big = t.data_ptr();
  }
  {
    at::Tensor half = bytes_tensor(2 * kMiB);  // 4 MiB is twice its class: taken
    EXPECT_EQ(half.data_ptr(), big);
  }
  const zz::HostCacheStats before = zz::host_cache_stats();
  at::Tensor small = bytes_tensor(kMiB + kMiB / 2);  // less than half of the idle block
  EXPECT_NE(small.data_ptr(), big);
  EXPECT_EQ(zz::host_cache_stats().allocations, before.allocations + 1);
}

TEST_F(HostCache, LeavesSmallAndHugeRequestsToTheDefaultAllocator) {
  const zz::HostCacheStats s0 = zz::host_cache_stats();
  {
    at::Tensor t = bytes_tensor(zz::kHostCacheMinBytes - 64);
    t.zero_();
    at::Tensor huge = bytes_tensor(zz::kHostCacheMaxBytes);
    huge.zero_();
  }
  c10::Allocator* a = c10::GetCPUAllocator();
  void* raw = a->raw_allocate(4096);
  std::memset(raw, 1, 4096);
  a->raw_deallocate(raw);
  const zz::HostCacheStats s1 = zz::host_cache_stats();
  EXPECT_EQ(s1.allocations, s0.allocations);
  EXPECT_EQ(s1.reuses, s0.reuses);
  EXPECT_EQ(s1.idle_bytes, s0.idle_bytes);
}

TEST_F(HostCache, RawAllocateAndDeallocateGoThroughTheCache) {
  c10::Allocator* a = c10::GetCPUAllocator();
  void* p = a->raw_allocate(2 * kMiB);
  std::memset(p, 1, 2 * kMiB);
  a->raw_deallocate(p);
  EXPECT_EQ(zz::host_cache_stats().idle_bytes, 2 * kMiB);
  void* q = a->raw_allocate(2 * kMiB);
  EXPECT_EQ(q, p);
  a->raw_deallocate(q);
}

TEST_F(HostCache, HoldsNoMoreThanItsBoundOverThePeakLive) {
  // Blocks of many classes, freed and requested in an order that finds no block of their class:
  // every new block frees idle ones to stay within the bound.
  std::vector<at::Tensor> live;
  for (int round = 0; round < 4; ++round) {
    for (size_t mib = 1; mib <= 12; mib += 1 + static_cast<size_t>(round)) {
      live.push_back(bytes_tensor(mib * kMiB + static_cast<size_t>(round) * 300'000));
      if (live.size() > 3) live.erase(live.begin());
      const zz::HostCacheStats s = zz::host_cache_stats();
      EXPECT_LE(static_cast<double>(s.live_bytes + s.idle_bytes),
                zz::kHostCacheMaxOverPeak * static_cast<double>(s.peak_live_bytes) + 1.0)
          << "round " << round << ", " << mib << " MiB";
    }
  }
  EXPECT_GT(zz::host_cache_stats().idle_bytes, 0u) << "the test must leave blocks idle";
}

TEST_F(HostCache, EndOfStepFreesTheBlocksNoRequestTook) {
  { at::Tensor a = bytes_tensor(2 * kMiB), b = bytes_tensor(8 * kMiB); }
  zz::end_of_host_cache_step();  // both were taken in the step that ended: kept
  EXPECT_EQ(zz::host_cache_stats().idle_bytes, 10 * kMiB);
  { at::Tensor a = bytes_tensor(2 * kMiB); }  // this step takes only the 2 MiB block
  zz::end_of_host_cache_step();
  EXPECT_EQ(zz::host_cache_stats().idle_bytes, 2 * kMiB) << "the 8 MiB block is freed";
  zz::end_of_host_cache_step();
  EXPECT_EQ(zz::host_cache_stats().idle_bytes, 0u) << "a step that took nothing keeps nothing";
}

TEST_F(HostCache, EmptyFreesIdleBlocksAndRestartsThePeak) {
  at::Tensor keep = bytes_tensor(kMiB);
  { at::Tensor a = bytes_tensor(16 * kMiB); }
  EXPECT_GE(zz::host_cache_stats().peak_live_bytes, 17 * kMiB);
  zz::empty_host_cache();
  const zz::HostCacheStats s = zz::host_cache_stats();
  EXPECT_EQ(s.idle_bytes, 0u);
  EXPECT_EQ(s.peak_live_bytes, s.live_bytes) << "the peak starts again from what is live";
}

TEST_F(HostCache, BlocksFreedAfterTheLastHolderLeftAreUnmapped) {
  at::Tensor t = bytes_tensor(5 * kMiB);
  t.fill_(2.0f);
  zz::release_host_cache();
  EXPECT_FALSE(zz::host_cache_installed());
  const size_t live = zz::host_cache_stats().live_bytes;
  t = at::Tensor();
  EXPECT_EQ(zz::host_cache_stats().live_bytes, live - 5 * kMiB);
  EXPECT_EQ(zz::host_cache_stats().idle_bytes, 0u);
  zz::acquire_host_cache();  // for TearDown
}

TEST_F(HostCache, AFailedMappingIsLibTorchsOutOfMemoryError) {
  // In a child whose address space is capped just above what it maps already.
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    long pages = 0;
    if (FILE* f = std::fopen("/proc/self/statm", "r")) {
      if (std::fscanf(f, "%ld", &pages) != 1) pages = 0;
      std::fclose(f);
    }
    const rlim_t cap = static_cast<rlim_t>(pages) * sysconf(_SC_PAGESIZE) + 4 * kMiB;
    const rlimit limit{cap, cap};
    if (pages == 0 || setrlimit(RLIMIT_AS, &limit) != 0) _exit(2);
    try {
      at::Tensor t = bytes_tensor(24 * kMiB);
      _exit(3);
    } catch (const c10::OutOfMemoryError& e) {
      const std::string what = e.what();
      _exit(what.find("zerotorch host cache: can't allocate memory: you tried to allocate "
                      "25165824 bytes") != std::string::npos
                ? 0
                : 4);
    }
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "2: no cap, 3: no error, 4: another message";
}

TEST_F(HostCache, AForkedChildAllocates) {
  // Another thread may hold the cache's lock when a DataLoader forks a worker; the child must
  // still allocate (the lock is taken around fork).
  at::Tensor keep = bytes_tensor(kMiB);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    at::Tensor t = bytes_tensor(6 * kMiB);
    std::memset(t.data_ptr(), 3, 6 * kMiB);
    keep = at::Tensor();
    _exit(static_cast<unsigned char*>(t.data_ptr())[100] == 3 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
