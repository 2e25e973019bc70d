#include "optim/param_groups.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fnmatch.h>
#include <map>

#include "base/error.h"

namespace zt::optim {
namespace {

bool contains_any(const std::string& name, const std::vector<std::string>& patterns) {
  for (const std::string& p : patterns) {
    if (!p.empty() && name.find(p) != std::string::npos) return true;
  }
  return false;
}

// k of the first "<prefix><k>." in name (prefix at the start or after a '.'), or -1.
int64_t block_index(const std::string& name, const std::vector<std::string>& prefixes) {
  for (const std::string& prefix : prefixes) {
    for (size_t pos = name.find(prefix); pos != std::string::npos;
         pos = name.find(prefix, pos + 1)) {
      if (pos != 0 && name[pos - 1] != '.') continue;
      size_t i = pos + prefix.size(), j = i;
      while (j < name.size() && name[j] >= '0' && name[j] <= '9') ++j;
      if (j > i && (j == name.size() || name[j] == '.')) {
        return std::strtoll(name.substr(i, j - i).c_str(), nullptr, 10);
      }
    }
  }
  return -1;
}

}  // namespace

bool glob_match(const std::string& pattern, const std::string& name) {
  return fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
}

ParamGrouping build_param_groups(const std::vector<ParamInfo>& params,
                                 const ParamGroupOptions& options) {
  ZT_CHECK(options.llrd_decay > 0 && options.llrd_decay <= 1,
           "optimizer llrd_decay must be in (0, 1], got ", options.llrd_decay);
  ParamGrouping out;
  const size_t n = params.size();
  std::vector<int64_t> block(n);
  int64_t max_block = -1;
  for (size_t i = 0; i < n; ++i) {
    ZT_CHECK(params[i].numel >= 0 && params[i].offset >= 0, "parameter ", params[i].name,
             " has numel ", params[i].numel, " and offset ", params[i].offset);
    block[i] = block_index(params[i].name, options.layer_prefixes);
    max_block = std::max(max_block, block[i]);
  }
  out.num_layers = options.num_layers > 0 ? options.num_layers : max_block + 1;
  ZT_CHECK(max_block < out.num_layers, "parameter names reach block ", max_block,
           " but num_layers is ", out.num_layers);

  out.group_of.assign(n, -1);
  out.layer_id.assign(n, 0);
  std::map<std::pair<bool, int64_t>, int64_t> index;  // (decay, depth from top) -> group
  for (size_t i = 0; i < n; ++i) {
    const std::string& name = params[i].name;
    int64_t layer;
    if (block[i] >= 0) {
      layer = block[i] + 1;
    } else if (contains_any(name, options.embedding_patterns)) {
      layer = 0;
    } else {
      layer = out.num_layers + 1;
    }
    out.layer_id[i] = layer;
    bool frozen = false;
    for (const std::string& p : options.freeze_patterns) frozen = frozen || glob_match(p, name);
    if (frozen) {
      out.frozen_numel += params[i].numel;
      continue;
    }
    const bool decay = !contains_any(name, options.no_decay_patterns);
    const int64_t depth = options.llrd_decay == 1.0 ? 0 : out.num_layers + 1 - layer;
    auto key = std::make_pair(decay, depth);
    auto it = index.find(key);
    if (it == index.end()) {
      ParamGroup g;
      g.decay = decay;
      g.lr_scale = std::pow(options.llrd_decay, static_cast<double>(depth));
      g.label = detail::str(decay ? "decay" : "no_decay", "/lr_scale=", g.lr_scale);
      it = index.emplace(key, static_cast<int64_t>(out.groups.size())).first;
      out.groups.push_back(std::move(g));
    }
    out.group_of[i] = it->second;
    out.groups[it->second].params.push_back(static_cast<int64_t>(i));
  }
  return out;
}

std::vector<GroupRange> shard_group_ranges(const ParamGrouping& grouping,
                                           const std::vector<ParamInfo>& params,
                                           int64_t shard_begin, int64_t shard_end,
                                           const GroupHyper& base, double lr) {
  ZT_CHECK(grouping.group_of.size() == params.size(), "shard_group_ranges: grouping of ",
           grouping.group_of.size(), " parameters used with ", params.size());
  struct Piece {
    int64_t begin, end, group;
  };
  std::vector<Piece> pieces;
  for (size_t i = 0; i < params.size(); ++i) {
    if (grouping.group_of[i] < 0) continue;
    const int64_t b = std::max(shard_begin, params[i].offset);
    const int64_t e = std::min(shard_end, params[i].offset + params[i].numel);
    if (b < e) pieces.push_back({b - shard_begin, e - shard_begin, grouping.group_of[i]});
  }
  std::sort(pieces.begin(), pieces.end(),
            [](const Piece& a, const Piece& b) { return a.begin < b.begin; });
  std::vector<GroupRange> out;
  int64_t last_group = -1;
  for (const Piece& p : pieces) {
    if (!out.empty() && last_group == p.group && out.back().end == p.begin) {
      out.back().end = p.end;
      continue;
    }
    ZT_CHECK(out.empty() || out.back().end <= p.begin, "parameters overlap in the flat buffer at ",
             p.begin + shard_begin);
    const ParamGroup& g = grouping.groups[p.group];
    GroupRange r{p.begin, p.end, base};
    r.hyper.lr = lr * g.lr_scale;
    if (!g.decay) r.hyper.weight_decay = 0;
    out.push_back(r);
    last_group = p.group;
  }
  return out;
}

}  // namespace zt::optim
