// core/aio/: round trips through AioHandle under every option of DeepSpeed's aio block, tails
// that O_DIRECT cannot take, the buffered fallback where the filesystem refuses O_DIRECT, and
// errors that name the file and the offset.

#include "core/aio/aio_handle.h"

#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

#include <gtest/gtest.h>

#include "base/error.h"
#include "core/aio/aligned_buffer.h"

namespace zt::aio {
namespace {

namespace fs = std::filesystem;

std::string scratch_dir() {
  const fs::path d =
      fs::path(ZT_BINARY_DIR) / "test_scratch" / ("aio_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d.string();
}

void fill_random(void* p, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  auto* b = static_cast<unsigned char*>(p);
  for (int64_t i = 0; i < n; ++i) b[i] = static_cast<unsigned char>(rng());
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.message();
  }
  return "";
}

struct OptionCase {
  int64_t block_size;
  int64_t queue_depth;
  int64_t thread_count;
  bool single_submit;
  bool overlap_events;
};

class AioRoundTrip : public ::testing::TestWithParam<OptionCase> {};

// 3 MiB + 5000 bytes at a 12 KiB offset: many blocks, more than one queue's worth, a tail.
TEST_P(AioRoundTrip, WriteThenReadGivesTheSameBytes) {
  const OptionCase c = GetParam();
  AioOptions o;
  o.block_size = c.block_size;
  o.queue_depth = c.queue_depth;
  o.thread_count = c.thread_count;
  o.single_submit = c.single_submit;
  o.overlap_events = c.overlap_events;
  AioHandle h(o);
  const int64_t n = (3 << 20) + 5000;
  const int64_t off = 3 * kAlignment;
  AlignedBuffer out(n), in(n);
  fill_random(out.data(), n, 7);
  const std::string path = scratch_dir() + "/roundtrip.swp";
  {
    AioFile f(path, /*create=*/true);
    h.write(f, out.data(), n, off);
  }
  EXPECT_EQ(fs::file_size(path), static_cast<uintmax_t>(off + n));
  AioFile f(path, /*create=*/false);
  AioHandle::Ticket t = h.start_read(f, in.data(), n, off);
  AioHandle::wait(t);
  AioHandle::wait(t);  // waiting twice is allowed
  EXPECT_EQ(std::memcmp(out.data(), in.data(), n), 0);
  fs::remove(path);
}

INSTANTIATE_TEST_SUITE_P(
    Options, AioRoundTrip,
    ::testing::Values(OptionCase{1 << 20, 8, 1, false, true},  // DeepSpeed's defaults
                      OptionCase{64 << 10, 4, 1, false, true},
                      OptionCase{64 << 10, 4, 2, true, true},
                      OptionCase{64 << 10, 3, 3, false, false},
                      OptionCase{5000, 2, 1, true, false}),  // block size rounded up to 4 KiB
    [](const ::testing::TestParamInfo<OptionCase>& info) {
      const OptionCase& c = info.param;
      return "Block" + std::to_string(c.block_size) + "Depth" + std::to_string(c.queue_depth) +
             "Threads" + std::to_string(c.thread_count) + (c.single_submit ? "Single" : "Batch") +
             (c.overlap_events ? "Overlap" : "LockStep");
    });

// Unaligned buffers, offsets and lengths cannot go through O_DIRECT: they still round-trip.
TEST(AioHandle, UnalignedBufferOffsetAndLengthRoundTrip) {
  AioOptions o;
  o.block_size = 8192;
  o.thread_count = 2;
  AioHandle h(o);
  const int64_t n = 100'003;
  AlignedBuffer out(n + 16), in(n + 16);
  char* src = static_cast<char*>(out.data()) + 3;  // not 4 KiB aligned
  char* dst = static_cast<char*>(in.data()) + 5;
  fill_random(src, n, 11);
  const std::string path = scratch_dir() + "/unaligned.swp";
  AioFile f(path, /*create=*/true);
  h.write(f, src, n, 777);
  h.read(f, dst, n, 777);
  EXPECT_EQ(std::memcmp(src, dst, n), 0);
  // An aligned transfer of the same file next to it leaves those bytes alone.
  AlignedBuffer z(kAlignment);
  h.write(f, z.data(), kAlignment, 200 * kAlignment);
  h.read(f, dst, n, 777);
  EXPECT_EQ(std::memcmp(src, dst, n), 0);
  fs::remove(path);
}

TEST(AioHandle, ZeroByteTransferIsANoOp) {
  AioHandle h;
  const std::string path = scratch_dir() + "/empty.swp";
  AioFile f(path, /*create=*/true);
  AlignedBuffer b(kAlignment);
  h.write(f, b.data(), 0, 0);
  h.read(f, b.data(), 0, 0);
  EXPECT_EQ(fs::file_size(path), 0u);
  fs::remove(path);
}

TEST(AioHandle, OpensWithODirectOnADiskFilesystem) {
  const std::string path = scratch_dir() + "/direct.swp";
  AioFile f(path, /*create=*/true);
  if (!f.direct()) GTEST_SKIP() << "the build directory's filesystem refuses O_DIRECT";
  EXPECT_GE(f.direct_fd(), 0);
  fs::remove(path);
}

// Where the filesystem refuses O_DIRECT (tmpfs before Linux 6.6) the file is buffered only and
// still round-trips; tmpfs itself may accept O_DIRECT on newer kernels, so both are exercised.
TEST(AioHandle, BufferedOnlyFilesRoundTrip) {
  std::vector<std::string> dirs = {scratch_dir()};
  if (fs::is_directory("/dev/shm")) dirs.push_back("/dev/shm");
  AioHandle h;
  const int64_t n = 3 * kAlignment + 100;
  AlignedBuffer out(n), in(n);
  fill_random(out.data(), n, 3);
  for (const std::string& d : dirs) {
    for (bool try_direct : {false, true}) {
      const std::string path = d + "/zt_aio_buffered_" + std::to_string(::getpid()) + ".swp";
      {
        AioFile f(path, /*create=*/true, try_direct);
        if (!try_direct) {
          EXPECT_FALSE(f.direct());
        }
        h.write(f, out.data(), n, kAlignment);
        std::memset(in.data(), 0, n);
        h.read(f, in.data(), n, kAlignment);
      }
      EXPECT_EQ(std::memcmp(out.data(), in.data(), n), 0) << path << " direct " << try_direct;
      fs::remove(path);
    }
  }
}

TEST(AioHandle, ReadPastTheEndNamesFileAndOffset) {
  AioOptions o;
  o.block_size = kAlignment;
  AioHandle h(o);
  const std::string path = scratch_dir() + "/short.swp";
  AioFile f(path, /*create=*/true);
  AlignedBuffer b(4 * kAlignment);
  h.write(f, b.data(), 2 * kAlignment, 0);
  const std::string msg = error_of([&] { h.read(f, b.data(), 4 * kAlignment, 0); });
  EXPECT_NE(msg.find("read of " + path), std::string::npos) << msg;
  EXPECT_NE(msg.find("at offset " + std::to_string(2 * kAlignment)), std::string::npos) << msg;
  EXPECT_NE(msg.find("ends before"), std::string::npos) << msg;
  fs::remove(path);
}

TEST(AioHandle, WriteErrorNamesFileOffsetAndReason) {
  const std::string path = scratch_dir() + "/readonly.swp";
  { AioFile create(path, /*create=*/true); }
  AioFile f(path, /*create=*/false);  // read-only descriptors: writes fail with EBADF
  AioHandle h;
  AlignedBuffer b(kAlignment);
  const std::string msg = error_of([&] { h.write(f, b.data(), kAlignment, 5 * kAlignment); });
  EXPECT_NE(msg.find("write of " + path + " at offset " + std::to_string(5 * kAlignment)),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find(std::strerror(EBADF)), std::string::npos) << msg;
  fs::remove(path);
}

TEST(AioFile, MissingFileIsNamed) {
  const std::string path = scratch_dir() + "/no/such/dir/x.swp";
  const std::string msg = error_of([&] { AioFile f(path, /*create=*/true); });
  EXPECT_NE(msg.find("cannot open " + path), std::string::npos) << msg;
}

TEST(AioHandle, BadOptionsAreNamed) {
  AioOptions o;
  o.queue_depth = 0;
  EXPECT_NE(error_of([&] { AioHandle h(o); }).find("aio.queue_depth"), std::string::npos);
  o = AioOptions{};
  o.thread_count = 0;
  EXPECT_NE(error_of([&] { AioHandle h(o); }).find("aio.thread_count"), std::string::npos);
}

TEST(AlignedBuffer, IsAlignedZeroedAndRoundedUp) {
  AlignedBuffer b(5000);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % kAlignment, 0u);
  EXPECT_EQ(b.capacity(), 2 * kAlignment);
  at::Tensor t = b.view(at::kFloat, 4096, 1024);
  EXPECT_EQ(t.sum().item<float>(), 0.0f);
  t.fill_(1.0f);
  EXPECT_EQ(static_cast<float*>(b.data())[1024], 1.0f);
}

}  // namespace
}  // namespace zt::aio
