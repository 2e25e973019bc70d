// No-decay, LLRD and freeze groups from names produce the expected per-parameter lr and decay,
// and shard ranges cut the flat buffer as a rank sees it.
#include "optim/param_groups.h"

#include <cmath>

#include <gtest/gtest.h>

#include "base/error.h"

namespace {

using zt::optim::ParamInfo;

// A small transformer's parameter list, laid out back to back in one flat buffer.
std::vector<ParamInfo> transformer() {
  std::vector<std::pair<std::string, int64_t>> named = {{"tok_embed.weight", 100},
                                                        {"blocks.0.attn.qkv.weight", 30},
                                                        {"blocks.0.attn.qkv.bias", 3},
                                                        {"blocks.0.ln_1.weight", 10},
                                                        {"blocks.1.mlp.fc.weight", 40},
                                                        {"blocks.1.mlp.fc.bias", 4},
                                                        {"blocks.2.mlp.fc.weight", 40},
                                                        {"final_norm.weight", 10},
                                                        {"head.weight", 50}};
  std::vector<ParamInfo> out;
  int64_t off = 0;
  for (auto& [name, n] : named) {
    out.push_back({name, n, off});
    off += n;
  }
  return out;
}

struct PerParam {
  double lr;
  double wd;
};

// Per-parameter (lr, weight decay) as the optimizer would see it, via shard_group_ranges over the
// whole buffer.
std::map<std::string, PerParam> per_param(const std::vector<ParamInfo>& params,
                                          const zt::optim::ParamGroupOptions& o, double lr,
                                          double wd) {
  auto grouping = zt::optim::build_param_groups(params, o);
  zt::optim::GroupHyper base;
  base.weight_decay = wd;
  auto ranges = zt::optim::shard_group_ranges(grouping, params, 0, 1000, base, lr);
  std::map<std::string, PerParam> out;
  for (const ParamInfo& p : params) {
    for (const auto& r : ranges) {
      if (r.begin <= p.offset && p.offset + p.numel <= r.end) {
        out[p.name] = {r.hyper.lr, r.hyper.weight_decay};
      }
    }
  }
  return out;
}

TEST(ParamGroups, NoDecayForBiasesAndNorms) {
  auto got = per_param(transformer(), {}, 0.1, 0.05);
  EXPECT_EQ(got.size(), 9u);
  for (const char* n : {"blocks.0.attn.qkv.bias", "blocks.0.ln_1.weight", "blocks.1.mlp.fc.bias",
                        "final_norm.weight"}) {
    EXPECT_EQ(got[n].wd, 0.0) << n;
  }
  for (const char* n : {"tok_embed.weight", "blocks.0.attn.qkv.weight", "head.weight"}) {
    EXPECT_EQ(got[n].wd, 0.05) << n;
  }
  for (auto& [n, pp] : got) EXPECT_EQ(pp.lr, 0.1) << n;  // no LLRD
  auto grouping = zt::optim::build_param_groups(transformer(), {});
  EXPECT_EQ(grouping.groups.size(), 2u);
}

TEST(ParamGroups, LayerWiseLrDecay) {
  zt::optim::ParamGroupOptions o;
  o.llrd_decay = 0.5;
  auto got = per_param(transformer(), o, 1.0, 0.0);
  // 3 blocks: embed layer 0 (0.5^4), blocks.k layer k+1 (0.5^(3-k)), head/final norm top (1).
  EXPECT_DOUBLE_EQ(got["tok_embed.weight"].lr, 0.0625);
  EXPECT_DOUBLE_EQ(got["blocks.0.attn.qkv.weight"].lr, 0.125);
  EXPECT_DOUBLE_EQ(got["blocks.0.ln_1.weight"].lr, 0.125);
  EXPECT_DOUBLE_EQ(got["blocks.1.mlp.fc.bias"].lr, 0.25);
  EXPECT_DOUBLE_EQ(got["blocks.2.mlp.fc.weight"].lr, 0.5);
  EXPECT_DOUBLE_EQ(got["final_norm.weight"].lr, 1.0);
  EXPECT_DOUBLE_EQ(got["head.weight"].lr, 1.0);
  auto g = zt::optim::build_param_groups(transformer(), o);
  EXPECT_EQ(g.num_layers, 3);
  EXPECT_EQ(g.layer_id[0], 0);
  EXPECT_EQ(g.layer_id[4], 2);
  EXPECT_EQ(g.layer_id[8], 4);
  // An explicit num_layers deepens everything: 12 blocks, block 2 is 10 below the top.
  o.num_layers = 12;
  EXPECT_DOUBLE_EQ(per_param(transformer(), o, 1.0, 0.0)["blocks.2.mlp.fc.weight"].lr,
                   std::pow(0.5, 10));
}

TEST(ParamGroups, FreezePatternsLeaveParametersOutOfEveryRange) {
  zt::optim::ParamGroupOptions o;
  o.freeze_patterns = {"tok_embed*", "blocks.?.attn.*"};
  auto params = transformer();
  auto g = zt::optim::build_param_groups(params, o);
  EXPECT_EQ(g.group_of[0], -1);
  EXPECT_EQ(g.group_of[1], -1);
  EXPECT_EQ(g.group_of[2], -1);
  EXPECT_GE(g.group_of[3], 0);
  EXPECT_EQ(g.frozen_numel, 133);
  auto ranges = zt::optim::shard_group_ranges(g, params, 0, 1000, {}, 0.1);
  for (const auto& r : ranges) EXPECT_GE(r.begin, 133);
}

TEST(ParamGroups, ShardRangesAreLocalSortedAndMerged) {
  auto params = transformer();  // 287 elements
  auto g = zt::optim::build_param_groups(params, {});
  zt::optim::GroupHyper base;
  base.weight_decay = 0.1;
  // Rank 1 of 2 with the buffer padded to 288: [144, 288); blocks.1.mlp.fc.weight starts at 143.
  auto r = zt::optim::shard_group_ranges(g, params, 144, 288, base, 0.01);
  ASSERT_FALSE(r.empty());
  EXPECT_EQ(r.front().begin, 0);
  EXPECT_EQ(r.back().end, 287 - 144);  // last element is padding
  for (size_t i = 1; i < r.size(); ++i) {
    EXPECT_EQ(r[i].begin, r[i - 1].end);  // the parameters are back to back
    EXPECT_NE(r[i].hyper.weight_decay, r[i - 1].hyper.weight_decay);  // same group merged
  }
  // blocks.1.mlp.fc.weight (decay) [143,183) merged with nothing before; then fc.bias no decay.
  EXPECT_EQ(r[0].end, 183 - 144);
  EXPECT_EQ(r[0].hyper.weight_decay, 0.1);
  EXPECT_EQ(r[1].hyper.weight_decay, 0.0);
}

TEST(ParamGroups, GlobMatch) {
  EXPECT_TRUE(zt::optim::glob_match("embed*", "embed.weight"));
  EXPECT_FALSE(zt::optim::glob_match("embed*", "tok_embed.weight"));
  EXPECT_TRUE(zt::optim::glob_match("*embed*", "tok_embed.weight"));
  EXPECT_TRUE(zt::optim::glob_match("blocks.?.attn.*", "blocks.7.attn.qkv.bias"));
}

TEST(ParamGroups, RejectsBadOptions) {
  zt::optim::ParamGroupOptions o;
  o.llrd_decay = 1.5;
  EXPECT_THROW(zt::optim::build_param_groups(transformer(), o), zt::Error);
  o.llrd_decay = 0.9;
  o.num_layers = 2;  // names reach blocks.2
  EXPECT_THROW(zt::optim::build_param_groups(transformer(), o), zt::Error);
}

}  // namespace
