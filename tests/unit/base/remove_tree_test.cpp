#include "base/remove_tree.h"

#include <cstdlib>
#include <fstream>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

namespace zt {
namespace {

bool exists(const std::string& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0;
}

std::string temp_dir() {
  std::string pattern = "/tmp/zt_remove_tree_XXXXXX";
  EXPECT_NE(::mkdtemp(pattern.data()), nullptr);
  return pattern;
}

TEST(RemoveTree, RemovesNestedFilesAndDirectories) {
  const std::string root = temp_dir();
  ASSERT_EQ(::mkdir((root + "/a").c_str(), 0700), 0);
  ASSERT_EQ(::mkdir((root + "/a/b").c_str(), 0700), 0);
  std::ofstream(root + "/top.swp") << "x";
  std::ofstream(root + "/a/b/deep.swp") << "y";
  EXPECT_EQ(remove_tree(root), "");
  EXPECT_FALSE(exists(root));
}

TEST(RemoveTree, RemovesALinkNotWhatItPointsTo) {
  const std::string root = temp_dir(), outside = temp_dir();
  std::ofstream(outside + "/keep") << "z";
  ASSERT_EQ(::symlink(outside.c_str(), (root + "/link").c_str()), 0);
  EXPECT_EQ(remove_tree(root), "");
  EXPECT_FALSE(exists(root));
  EXPECT_TRUE(exists(outside + "/keep"));
  EXPECT_EQ(remove_tree(outside), "");
}

TEST(RemoveTree, AMissingPathIsNoErrorAndAFileIsRemoved) {
  EXPECT_EQ(remove_tree("/tmp/zt_remove_tree_does_not_exist_here"), "");
  const std::string root = temp_dir();
  std::ofstream(root + "/f") << "w";
  EXPECT_EQ(remove_tree(root + "/f"), "");
  EXPECT_FALSE(exists(root + "/f"));
  EXPECT_EQ(remove_tree(root), "");
}

TEST(RemoveTree, AnEntryThatCannotGoIsNamed) {
  if (::geteuid() == 0) GTEST_SKIP() << "root removes entries of a read-only directory";
  const std::string root = temp_dir();
  ASSERT_EQ(::mkdir((root + "/ro").c_str(), 0700), 0);
  std::ofstream(root + "/ro/f") << "v";
  ASSERT_EQ(::chmod((root + "/ro").c_str(), 0500), 0);
  const std::string err = remove_tree(root);
  EXPECT_NE(err.find(root + "/ro/f"), std::string::npos) << err;
  ASSERT_EQ(::chmod((root + "/ro").c_str(), 0700), 0);
  EXPECT_EQ(remove_tree(root), "");
}

}  // namespace
}  // namespace zt
