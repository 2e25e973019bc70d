// Every real DeepSpeed config of tests/data/deepspeed-configs (copied byte for byte from public
// repositories; SOURCES.md says where from) against the outcome deepspeed_configs_manifest.txt
// records for it, worked out from today's DeepSpeed (and the Hugging Face Trainer's "auto"
// filling, with the Trainer's defaults, world size 2):
//   accept              DeepSpeed accepts it; so must we (warnings allowed)
//   reject-ds KEY[,KEY]  DeepSpeed rejects it too; every error must name one of the keys, and
//                       each key must be named
//   reject-zt KEY[,KEY]  DeepSpeed accepts it, but it asks for something zerotorch does not have
//                       and will not silently ignore (memory or numerics would differ)
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/config/config.h"
#include "tests/unit/core/config/trainer_defaults.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

struct Expected {
  std::string outcome;
  std::vector<std::string> keys;
};

std::map<std::string, Expected> read_manifest() {
  std::map<std::string, Expected> m;
  std::ifstream in(ZT_DS_MANIFEST);
  std::string line;
  while (std::getline(in, line)) {
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line = line.substr(0, hash);
    std::istringstream ss(line);
    std::string file, outcome, keys;
    if (!(ss >> file >> outcome)) continue;
    Expected e{outcome, {}};
    if (ss >> keys) {
      std::stringstream ks(keys);
      std::string k;
      while (std::getline(ks, k, ',')) e.keys.push_back(k);
    }
    m[file] = e;
  }
  return m;
}

using zt::config_test::trainer_defaults;

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += "\n  " + l;
  return s;
}

TEST(DeepSpeedConfigs, EveryFileHasItsExpectedOutcome) {
  const std::map<std::string, Expected> manifest = read_manifest();
  ASSERT_FALSE(manifest.empty()) << ZT_DS_MANIFEST;
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(ZT_DS_CONFIGS)) {
    if (e.path().extension() == ".json") files.push_back(e.path().filename().string());
  }
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files.size(), 68u);
  int accepted = 0, rejected = 0;
  for (const auto& file : files) {
    SCOPED_TRACE(file);
    auto it = manifest.find(file);
    ASSERT_NE(it, manifest.end()) << "not in the manifest";
    const Expected& want = it->second;
    ConfigReport r =
        check_config_file(std::string(ZT_DS_CONFIGS) + "/" + file, {}, 2, trainer_defaults());
    if (want.outcome == "accept") {
      EXPECT_TRUE(r.errors.empty()) << "errors:" << joined(r.errors);
      accepted += r.errors.empty();
      continue;
    }
    ASSERT_TRUE(want.outcome == "reject-ds" || want.outcome == "reject-zt") << want.outcome;
    ASSERT_FALSE(want.keys.empty());
    EXPECT_FALSE(r.errors.empty()) << "accepted, expected " << want.outcome;
    rejected += !r.errors.empty();
    for (const auto& e : r.errors) {
      bool named = false;
      for (const auto& k : want.keys) named |= e.rfind(k + ":", 0) == 0 || e.rfind(k + " ", 0) == 0;
      EXPECT_TRUE(named) << "error about another key: " << e;
    }
    for (const auto& k : want.keys) {
      bool found = false;
      for (const auto& e : r.errors) found |= e.rfind(k, 0) == 0;
      EXPECT_TRUE(found) << "no error names " << k << ":" << joined(r.errors);
    }
  }
  for (const auto& [file, e] : manifest) {
    EXPECT_TRUE(std::find(files.begin(), files.end(), file) != files.end())
        << file << " is in the manifest but not in " << ZT_DS_CONFIGS;
  }
  std::printf("deepspeed configs: %d accepted, %d rejected as expected\n", accepted, rejected);
}

}  // namespace
}  // namespace zt
