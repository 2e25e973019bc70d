#include "train/load_by_name.h"

#include <set>

#include "base/error.h"
#include "base/shape_str.h"
#include "optim/param_groups.h"
#include "train/training_run.h"

namespace zt::train {
namespace {

bool any_glob(const std::vector<std::string>& globs, const std::string& name) {
  for (const auto& g : globs)
    if (optim::glob_match(g, name)) return true;
  return false;
}

}  // namespace

std::string LoadReport::summary() const {
  return detail::str("loaded ", loaded.size(), " parameters, new ", fresh.size(),
                     fresh.empty() ? "" : " (" + join(fresh) + ")", ", skipped ", skipped.size(),
                     skipped.empty() ? "" : " (" + join(skipped) + ")");
}

LoadReport load_by_name(torch::nn::Module& model, const std::map<std::string, at::Tensor>& source,
                        const LoadByNameOptions& o) {
  LoadReport r;
  std::set<std::string> used;
  auto params = model.named_parameters();
  // Check everything first, so a bad source leaves the model untouched.
  std::vector<std::pair<at::Tensor, at::Tensor>> copies;
  for (const auto& p : params) {
    const std::string& name = p.key();
    const bool has_prefix = name.rfind(o.prefix, 0) == 0;
    const std::string src = has_prefix ? name.substr(o.prefix.size()) : "";
    auto it = has_prefix ? source.find(src) : source.end();
    if (it != source.end() && any_glob(o.expected_skipped, src)) {
      r.fresh.push_back(name);  // its pretrained value is listed as skipped
      continue;
    }
    if (it == source.end()) {
      ZT_CHECK(any_glob(o.expected_new, name), "load by name: model parameter ", name,
               " has no pretrained value", has_prefix ? " '" + src + "'" : std::string(),
               " (list it as expected new to keep its initialisation)");
      r.fresh.push_back(name);
      continue;
    }
    ZT_CHECK(it->second.sizes() == p.value().sizes(), "load by name: ", name, " is ",
             shape_str(p.value().sizes()), " in the model, pretrained '", src, "' is ",
             shape_str(it->second.sizes()));
    copies.emplace_back(p.value(), it->second);
    used.insert(src);
    r.loaded.push_back(name);
  }
  for (const auto& [name, value] : source) {
    if (used.count(name)) continue;
    ZT_CHECK(any_glob(o.expected_skipped, name), "load by name: pretrained '", name,
             "' matches no model parameter", o.prefix.empty() ? "" : " '" + o.prefix + name + "'",
             " (list it as expected skipped to drop it)");
    r.skipped.push_back(name);
  }
  torch::NoGradGuard no_grad;
  for (auto& [dst, src] : copies) dst.copy_(src);
  return r;
}

}  // namespace zt::train
