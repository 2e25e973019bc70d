// Monitors: csv_monitor files in DeepSpeed's layout, CRC32C against its standard check value,
// and TensorBoard event files read back by TensorBoard itself (read_events.py, run with the
// project's virtualenv python).
#include "train/monitor/monitor.h"

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <unistd.h>

#include <gtest/gtest.h>

#include "train/monitor/csv_monitor.h"
#ifdef ZT_HAVE_TENSORBOARD
#include "train/monitor/tensorboard_writer.h"
#endif

namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  return d;
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(Monitor, PythonFloatRepr) {
  const std::map<double, std::string> cases = {{0.5, "0.5"},
                                               {1e-05, "1e-05"},
                                               {100.0, "100.0"},
                                               {1e16, "1e+16"},
                                               {1234567.0, "1234567.0"},
                                               {0.0001, "0.0001"},
                                               {-2.5, "-2.5"},
                                               {1e22, "1e+22"},
                                               {0.1 + 0.2, "0.30000000000000004"},
                                               {1.5e-7, "1.5e-07"},
                                               {123456789012345678.0, "1.2345678901234568e+17"},
                                               {65536.0, "65536.0"},
                                               {0.0, "0.0"}};
  for (const auto& [v, text] : cases) EXPECT_EQ(zt::python_float_repr(v), text) << v;
}

TEST(Monitor, CsvFilesInDeepSpeedLayout) {
  const fs::path dir = fresh_dir("zt_csv_monitor");
  {
    zt::CsvMonitor csv(dir.string());
    csv.write(8, "Train/Samples/train_loss", 2.5);
    csv.write(8, "Train/Samples/lr", 1e-05);
    csv.write(16, "Train/Samples/train_loss", 1.25);
    csv.write(16, "Train/Samples/my loss", 3.0);
  }
  EXPECT_EQ(read_all(dir / "Train_Samples_train_loss.csv"),
            "step,train_loss\r\n8,2.5\r\n16,1.25\r\n");
  EXPECT_EQ(read_all(dir / "Train_Samples_lr.csv"), "step,lr\r\n8,1e-05\r\n");
  EXPECT_EQ(read_all(dir / "Train_Samples_my_loss.csv"), "step,my loss\r\n16,3.0\r\n");
  fs::remove_all(dir);
}

TEST(Monitor, MakeMonitorWritesOnRankZeroUnderOutputPathAndJobName) {
  const fs::path out = fresh_dir("zt_make_monitor");
  zt::Config config;
  config.csv_monitor.enabled = true;
  config.csv_monitor.output_path = out.string();
  config.csv_monitor.job_name = "job";
  auto other = zt::make_monitor(config, 1);
  other->write(1, "Train/Samples/lr", 1.0);
  other->flush();
  EXPECT_FALSE(fs::exists(out)) << "only rank 0 writes";
  auto m = zt::make_monitor(config, 0);
  m->write(1, zt::kMonitorLr, 0.25);
  m->flush();
  EXPECT_EQ(read_all(out / "job" / "Train_Samples_lr.csv"), "step,lr\r\n1,0.25\r\n");
  fs::remove_all(out);
}

#ifdef ZT_HAVE_TENSORBOARD
TEST(Monitor, Crc32cCheckValue) {
  // The CRC-32C check value of "123456789" (RFC 3720, iSCSI).
  EXPECT_EQ(zt::crc32c("123456789", 9), 0xE3069283u);
}

TEST(Monitor, TensorBoardReadsOurEventFiles) {
  const fs::path dir = fresh_dir("zt_tensorboard");
  std::string path;
  {
    zt::Config config;
    config.tensorboard.enabled = true;
    config.tensorboard.output_path = dir.string();
    config.tensorboard.job_name = "run1";
    auto m = zt::make_monitor(config, 0);
    for (int step = 1; step <= 3; ++step) {
      m->write(step * 16, zt::kMonitorTrainLoss, 4.0 / step);
      m->write(step * 16, zt::kMonitorLr, 1e-4 * step);
    }
    m->write(48, zt::kMonitorLossScale, 65536.0);
    m->flush();
    for (const auto& e : fs::directory_iterator(dir / "run1")) path = e.path().string();
  }
  ASSERT_NE(path.find("events.out.tfevents."), std::string::npos) << path;
  const std::string cmd = std::string(ZT_PYTHON) + " " + ZT_READ_EVENTS + " " + path + " 2>&1";
  std::FILE* pipe = ::popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  std::array<char, 512> buf{};
  while (std::fgets(buf.data(), buf.size(), pipe)) out += buf.data();
  const int status = ::pclose(pipe);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 2) {
    GTEST_SKIP() << "the tensorboard package is missing from " << ZT_PYTHON
                 << " (scripts/setup.sh installs it): " << out;
  }
  ASSERT_EQ(status, 0) << out;
  // Values are float32 in the file, as with every TensorBoard scalar.
  const std::string expect =
      "records 8\n"
      "file_version 2.0\n"  // TensorBoard parses "brain.Event:2" as a number
      "Train/Samples/loss_scale 48 65536.0\n"
      "Train/Samples/lr 16 " +
      zt::python_float_repr(static_cast<float>(1e-4)) + "\n" + "Train/Samples/lr 32 " +
      zt::python_float_repr(static_cast<float>(2e-4)) + "\n" + "Train/Samples/lr 48 " +
      zt::python_float_repr(static_cast<float>(3e-4)) + "\n" +
      "Train/Samples/train_loss 16 4.0\n"
      "Train/Samples/train_loss 32 2.0\n"
      "Train/Samples/train_loss 48 " +
      zt::python_float_repr(static_cast<float>(4.0 / 3)) + "\n";
  EXPECT_EQ(out, expect);
  fs::remove_all(dir);
}
#endif

}  // namespace
