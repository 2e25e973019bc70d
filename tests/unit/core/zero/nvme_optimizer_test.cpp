// core/zero/nvme_optimizer.h in one process: chunks round-trip through the swap files with and
// without the pipeline; a bad nvme_path (missing, not a directory, unwritable, too small) is one
// error naming the path and the bytes needed; an I/O error mid-run names the file and offset.
// Equivalence with CPU offload is tests/multirank/core/engine (EngineNvmeOffload).

#include "core/zero/nvme_optimizer.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "base/error.h"
#include "core/engine_options.h"

namespace zt::zero {
namespace {

namespace fs = std::filesystem;

std::string scratch() {
  const fs::path d =
      fs::path(ZT_BINARY_DIR) / "test_scratch" / ("nvme_unit_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d.string();
}

// zero_optimization with offload_optimizer nvme under path, and the aio block.
EngineOptions options(const std::string& path, bool pipelined) {
  EngineOptions o;
  o.offload_optimizer.device = OffloadDevice::kNvme;
  o.offload_optimizer.nvme_path = path;
  o.sub_group_size = 40;
  o.offload_optimizer.buffer_count = pipelined ? 3 : 1;
  o.offload_optimizer.pipeline_read = o.offload_optimizer.pipeline_write = pipelined;
  o.aio.block_size = 4096;
  return o;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.message();
  }
  return "";
}

const std::vector<std::string> kStates = {"exp_avg", "exp_avg_sq"};

// The swapper as the engine builds it from o.
NvmeOptimizerSwapper make(const EngineOptions& o, int rank, const std::vector<int64_t>& numels) {
  return NvmeOptimizerSwapper(o.offload_optimizer, o.sub_group_size, o.aio, rank, numels, kStates);
}

// Values of element i of a slot: master s*1000 + i, state k: -(s*1000 + i) - k.
void fill(NvmeOptimizerSwapper::Chunk& c, float shift) {
  at::Tensor idx = at::arange(c.begin, c.begin + c.numel, at::kFloat) + 1000.0f * c.slot + shift;
  c.master.copy_(idx);
  for (size_t k = 0; k < c.states.size(); ++k) c.states[k].copy_(-idx - static_cast<float>(k));
}

TEST(NvmeOptimizerSwapper, ChunksRoundTripThroughTheirFiles) {
  for (bool pipelined : {false, true}) {
    NvmeOptimizerSwapper s = make(options(scratch(), pipelined), 0, {100, 50, 7});
    EXPECT_EQ(s.nvme_bytes(), 3 * 4096 * (3 + 2 + 1));  // chunks of 40, 40, 20 | 40, 10 | 7
    std::vector<int64_t> seen;
    s.for_each_chunk(
        {0, 1, 2}, [&](NvmeOptimizerSwapper::Chunk& c) { fill(c, 0.0f); },
        /*read=*/false, /*write_back=*/true);
    // Step-like pass over two slots: read, change, write back.
    s.for_each_chunk(
        {0, 2},
        [&](NvmeOptimizerSwapper::Chunk& c) {
          seen.push_back(c.slot * 1000 + c.begin);
          at::Tensor want = at::arange(c.begin, c.begin + c.numel, at::kFloat) + 1000.0f * c.slot;
          EXPECT_TRUE(at::equal(c.master, want)) << c.slot << "/" << c.begin;
          EXPECT_TRUE(at::equal(c.states[1], -want - 1.0f)) << c.slot << "/" << c.begin;
          fill(c, 0.5f);
        },
        /*read=*/true, /*write_back=*/true);
    EXPECT_EQ(seen, (std::vector<int64_t>{0, 40, 80, 2000}));
    // Slot 1 untouched, slots 0 and 2 changed.
    s.for_each_chunk(
        {0, 1, 2},
        [&](NvmeOptimizerSwapper::Chunk& c) {
          const float shift = c.slot == 1 ? 0.0f : 0.5f;
          at::Tensor want =
              at::arange(c.begin, c.begin + c.numel, at::kFloat) + 1000.0f * c.slot + shift;
          EXPECT_TRUE(at::equal(c.master, want)) << c.slot << "/" << c.begin;
          EXPECT_TRUE(at::equal(c.states[0], -want)) << c.slot << "/" << c.begin;
        },
        /*read=*/true, /*write_back=*/false);
    const std::string dir = s.directory();
    EXPECT_TRUE(fs::exists(dir + "/buffer0_chunk2.swp"));
  }
}

TEST(NvmeOptimizerSwapper, RemovesItsFilesWhenDestroyed) {
  std::string dir;
  {
    NvmeOptimizerSwapper s = make(options(scratch(), true), 3, {64});
    dir = s.directory();
    EXPECT_NE(dir.find("zerotorch_optimizer_rank3_pid"), std::string::npos) << dir;
    EXPECT_TRUE(fs::is_directory(dir));
  }
  EXPECT_FALSE(fs::exists(dir));
}

TEST(NvmeOptimizerSwapper, MissingPathNamesItAndTheBytesNeeded) {
  const std::string path = scratch() + "/no_such_dir";
  const std::string msg =
      error_of([&] { NvmeOptimizerSwapper s = make(options(path, false), 0, {100}); });
  EXPECT_NE(msg.find("nvme_path " + path + " does not exist"), std::string::npos) << msg;
  EXPECT_NE(msg.find("needs " + std::to_string(3 * 3 * 4096) + " bytes"), std::string::npos) << msg;
}

TEST(NvmeOptimizerSwapper, PathThatIsAFileIsRefused) {
  const std::string path = scratch() + "/a_file";
  std::ofstream(path) << "x";
  const std::string msg =
      error_of([&] { NvmeOptimizerSwapper s = make(options(path, false), 0, {100}); });
  EXPECT_NE(msg.find(path + " is not a directory"), std::string::npos) << msg;
}

// /proc takes no new directory, even from root.
TEST(NvmeOptimizerSwapper, UnwritablePathIsRefused) {
  const std::string msg =
      error_of([&] { NvmeOptimizerSwapper s = make(options("/proc", false), 0, {100}); });
  EXPECT_NE(msg.find("nvme_path /proc is not writable"), std::string::npos) << msg;
  EXPECT_NE(msg.find("needs " + std::to_string(3 * 3 * 4096) + " bytes"), std::string::npos) << msg;
}

TEST(NvmeOptimizerSwapper, TooSmallFilesystemIsRefusedBeforeAnythingIsWritten) {
  const std::string path = scratch();
  const int64_t huge = int64_t{1} << 50;  // 12 PiB of master and Adam state
  EngineOptions o = options(path, false);
  o.sub_group_size = huge;
  const std::string msg = error_of([&] { NvmeOptimizerSwapper s = make(o, 0, {huge}); });
  EXPECT_NE(msg.find("nvme_path " + path + " is too small"), std::string::npos) << msg;
  EXPECT_NE(msg.find("needs " + std::to_string(3 * huge * 4)), std::string::npos) << msg;
  EXPECT_NE(msg.find(" free"), std::string::npos) << msg;
  for (const auto& e : fs::directory_iterator(path)) {
    EXPECT_EQ(e.path().filename().string().rfind("zerotorch_optimizer", 0), std::string::npos)
        << "left behind: " << e.path();
  }
}

// A swap file that lost its bytes (a disk error, another process) stops the step with the file
// and the offset of the failed read.
TEST(NvmeOptimizerSwapper, ReadErrorMidRunNamesFileAndOffset) {
  for (bool pipelined : {false, true}) {
    NvmeOptimizerSwapper s = make(options(scratch(), pipelined), 0, {100});
    s.for_each_chunk(
        {0}, [&](NvmeOptimizerSwapper::Chunk& c) { fill(c, 0.0f); }, false, true);
    const std::string bad = s.directory() + "/buffer0_chunk1.swp";
    fs::resize_file(bad, 4096);  // the master region stays, the state is gone
    int stepped = 0;
    const std::string msg = error_of([&] {
      s.for_each_chunk(
          {0}, [&](NvmeOptimizerSwapper::Chunk&) { ++stepped; }, true, true);
    });
    EXPECT_NE(msg.find("read of " + bad + " at offset 4096"), std::string::npos) << msg;
    EXPECT_LE(stepped, 1) << "chunks after the failed read were stepped";
  }
}

}  // namespace
}  // namespace zt::zero
