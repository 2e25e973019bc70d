// zt-config as users run it: a real process, exit status and output checked.
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

namespace {

struct ToolRun {
  int status;
  std::string out;  // stdout
  std::string err;  // stderr
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Per-process names under the build's scratch folder (not /tmp, which they would litter): ctest
// runs each case as its own process, two at a time.
std::string scratch_prefix() {
  const std::string dir = std::string(ZT_BINARY_DIR) + "/test_scratch/zt_config_tool/";
  std::filesystem::create_directories(dir);
  return dir + std::to_string(::getpid()) + "_";
}

ToolRun zt_config(const std::string& args) {
  const std::string dir = scratch_prefix();
  const std::string out = dir + "zt_config_out.txt", err = dir + "zt_config_err.txt";
  const std::string cmd =
      std::string(ZT_BINARY_DIR) + "/bin/zt-config " + args + " >" + out + " 2>" + err;
  int rc = std::system(cmd.c_str());
  ToolRun r{WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, slurp(out), slurp(err)};
  std::remove(out.c_str());
  std::remove(err.c_str());
  return r;
}

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = scratch_prefix() + name;
  std::ofstream(path) << text;
  return path;
}

const std::string kConfigs = std::string(ZT_SOURCE_DIR) + "/configs/";

TEST(ZtConfigTool, ValidPrintsResolvedJsonAndExitsZero) {
  ToolRun r = zt_config("validate " + kConfigs + "zero3.yaml --world-size 4");
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_EQ(r.out.rfind("{", 0), 0u);
  EXPECT_NE(r.out.find("\"train_batch_size\": 32"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"stage\": 3"), std::string::npos);
}

// --params: model-state bytes per rank for each offload choice, on stderr.
TEST(ZtConfigTool, ParamsPrintsTheMemoryEstimate) {
  ToolRun r = zt_config("validate " + kConfigs + "offload_nvme.json --world-size 2 --params 2e9");
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_EQ(r.out.rfind("{", 0), 0u);
  EXPECT_NE(r.err.find("memory: model states per rank for 2000000000 parameters, 2 rank(s)"),
            std::string::npos)
      << r.err;
  // bf16, stage 3, Adam: 6 GB per rank in memory without offload's 12 GB, which go to NVMe.
  EXPECT_NE(r.err.find("offload_param none, offload_optimizer nvme: device 5.59 GiB, host 0.45 "
                       "GiB, nvme 11.18 GiB   <- this config"),
            std::string::npos)
      << r.err;
}

TEST(ZtConfigTool, OverridesAndProgramValues) {
  ToolRun r =
      zt_config("validate " + kConfigs +
                "zero2.json --set zero_optimization.stage=1 "
                "--set train_micro_batch_size_per_gpu=auto --per-device-train-batch-size 3");
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("\"stage\": 1"), std::string::npos);
  EXPECT_NE(r.out.find("\"train_micro_batch_size_per_gpu\": 3"), std::string::npos) << r.out;
}

TEST(ZtConfigTool, BadFilePrintsEveryErrorAndExitsOne) {
  const std::string path = write_temp("zt_bad.json", R"({
  "train_batch_size": 32, "train_micro_batch_size_per_gpu": 4,
  "gradient_accumulation_steps": 2,
  "zero_optimization": {"stgae": 3},
  "fp16": {"enabled": true}, "bf16": {"enabled": true},
  "wandb": {"enabled": true}
})");
  ToolRun r = zt_config("validate " + path + " --world-size 2");
  EXPECT_EQ(r.status, 1);
  int lines = 0;
  for (char ch : r.out) lines += ch == '\n';
  EXPECT_EQ(lines, 3) << r.out;
  EXPECT_NE(r.out.find("zero_optimization.stgae: unknown key; did you mean 'stage'?"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("train_batch_size: 32 != "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fp16.enabled"), std::string::npos) << r.out;
  // The warning goes to stderr, not among the errors.
  EXPECT_NE(r.err.find("wandb"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("wandb"), std::string::npos);
}

TEST(ZtConfigTool, BadCommandLineExitsOneWithOneLine) {
  ToolRun r = zt_config("validate " + kConfigs + "zero2.json --world-size zero");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("zt-config: error:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("world-size"), std::string::npos) << r.err;
  ToolRun unknown = zt_config("lint " + kConfigs + "zero2.json");
  EXPECT_EQ(unknown.status, 1);
  EXPECT_NE(unknown.err.find("unknown command 'lint'"), std::string::npos) << unknown.err;
  ToolRun help = zt_config("--help");
  EXPECT_EQ(help.status, 0);
  EXPECT_NE(help.out.find("--set"), std::string::npos);
}

}  // namespace
