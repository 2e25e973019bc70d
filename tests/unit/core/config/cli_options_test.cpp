#include "core/config/cli_options.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/error.h"

namespace zt {
namespace {

namespace po = boost::program_options;

// argv as the OS hands it over.
bool parse(CliOptions& cli, std::vector<std::string> args) {
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  return cli.parse(static_cast<int>(argv.size()), argv.data());
}

TEST(CliOptions, ConfigSetAndProgramOptions) {
  CliOptions cli("prog", "does things");
  cli.add()("steps", po::value<int>()->default_value(5), "steps");
  ASSERT_TRUE(parse(cli, {"prog", "--config", "a.yaml", "--set", "zero_optimization.stage=3",
                          "--set=seed=7", "--steps", "12"}));
  EXPECT_EQ(cli.config_path(), "a.yaml");
  EXPECT_EQ(cli.overrides(), (std::vector<std::string>{"zero_optimization.stage=3", "seed=7"}));
  EXPECT_EQ(cli.get<int>("steps"), 12);
  EXPECT_EQ(cli.world_size(), 1);
}

TEST(CliOptions, HelpReturnsFalseAndListsOptions) {
  CliOptions cli("prog", "does things");
  cli.add()("steps", po::value<int>(), "training steps");
  testing::internal::CaptureStdout();
  EXPECT_FALSE(parse(cli, {"prog", "--help"}));
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("Usage: prog"), std::string::npos);
  for (const char* opt : {"--config", "--set", "--steps", "training steps"}) {
    EXPECT_NE(out.find(opt), std::string::npos) << opt;
  }
}

TEST(CliOptions, BadCommandLinesAreOneLineErrors) {
  const std::vector<std::vector<std::string>> bad = {
      {"prog", "--config", "a.yaml", "--bogus"},
      {"prog", "--config"},
      {"prog", "--config", "a.yaml", "--steps", "many"},
      {"prog"},  // --config is required by default
  };
  for (const auto& args : bad) {
    CliOptions cli("prog", "");
    cli.add()("steps", po::value<int>(), "steps");
    try {
      parse(cli, args);
      ADD_FAILURE() << "accepted " << args.back();
    } catch (const Error& e) {
      EXPECT_EQ(e.message().find('\n'), std::string::npos);
      EXPECT_FALSE(e.message().empty());
    }
  }
  CliOptions cli("prog", "");
  cli.add()("steps", po::value<int>(), "steps");
  try {
    parse(cli, {"prog", "--config", "a.yaml", "--steps", "many"});
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("steps"), std::string::npos) << e.message();
  }
}

TEST(CliOptions, PositionalsAreHiddenFromOptionList) {
  CliOptionsSpec spec;
  spec.config_required = false;
  CliOptions cli("tool", "", spec);
  cli.add_hidden()("file", po::value<std::string>(), "");
  cli.add_positional("file", 1);
  ASSERT_TRUE(parse(cli, {"tool", "x.yaml"}));
  EXPECT_EQ(cli.get<std::string>("file"), "x.yaml");
  EXPECT_NE(cli.help().find("Usage: tool FILE [options]"), std::string::npos) << cli.help();
  EXPECT_EQ(cli.help().find("--file"), std::string::npos);
  EXPECT_THROW(cli.get<int>("missing"), Error);
}

TEST(CliOptions, WorldSizeWhereEnabled) {
  CliOptionsSpec spec;
  spec.world_size = true;
  spec.config_required = false;
  CliOptions cli("tool", "", spec);
  ASSERT_TRUE(parse(cli, {"tool", "--world-size", "8"}));
  EXPECT_EQ(cli.world_size(), 8);
  CliOptions zero("tool", "", spec);
  EXPECT_THROW(parse(zero, {"tool", "--world-size", "0"}), Error);
  CliOptions plain("tool", "");  // not offered unless asked for
  EXPECT_THROW(parse(plain, {"tool", "--config", "a.yaml", "--world-size", "2"}), Error);
}

TEST(CliOptions, LoadConfigUsesConfigAndOverrides) {
  CliOptions cli("prog", "");
  const std::string path = std::string(ZT_SOURCE_DIR) + "/configs/zero2.json";
  ASSERT_TRUE(parse(cli, {"prog", "--config", path, "--set", "zero_optimization.stage=1"}));
  Config c = cli.load_config(2);
  EXPECT_EQ(c.zero_optimization.stage, 1);
  EXPECT_EQ(c.train_batch_size, 16);
}

}  // namespace
}  // namespace zt
