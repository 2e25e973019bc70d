#include "core/checkpoint/deepspeed_import.h"

#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "base/error.h"
#include "base/logging.h"
#include "core/checkpoint/format.h"
#include "weights/deepspeed_universal.h"
#include "weights/state_dict_file.h"

namespace zt {
namespace fs = std::filesystem;
namespace {

// One parameter of the checkpoint being written: its zerotorch name, its source name, shape.
struct Param {
  std::string name, source;
  std::vector<int64_t> shape;
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

std::vector<Param> renamed(const std::vector<std::string>& sources,
                           const DeepSpeedImportOptions& o) {
  std::vector<Param> out;
  std::map<std::string, std::string> taken;  // zerotorch name -> source name
  for (const auto& s : sources) {
    const std::string name = o.rename ? o.rename(s) : s;
    if (name.empty()) continue;
    auto [it, fresh] = taken.emplace(name, s);
    ZT_CHECK(fresh, "DeepSpeed parameters ", it->second, " and ", s, " are both renamed to ", name);
    out.push_back({name, s, {}});
  }
  ZT_CHECK(!out.empty(), "no DeepSpeed parameter is left to import after renaming");
  return out;
}

// A fresh CPU generator's state: DeepSpeed's RNG does not carry over.
at::Tensor fresh_rng_state() {
  at::Generator gen = at::detail::createCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

// The writer's side shared by both imports: the tag directory, one shard (rank 0 of 1) whose
// buffers `fill` writes in `params` order (setting each parameter's shape), the metadata and
// `latest`. bytes: the tensor data the shard will hold, for the error when the device fills up.
std::string write_checkpoint(const std::string& out_dir, const std::string& tag,
                             std::vector<Param>& params, int64_t step, uint64_t bytes,
                             const DeepSpeedImportOptions& o,
                             const std::function<void(ckpt::ShardWriter&, Param&)>& fill) {
  ZT_CHECK(!tag.empty() && tag.find('/') == std::string::npos && tag != "." && tag != "..",
           "checkpoint tag '", tag, "' must be a non-empty name without '/'");
  ZT_CHECK(o.gradient_accumulation_steps >= 1, "gradient_accumulation_steps must be >= 1, got ",
           o.gradient_accumulation_steps);
  const fs::path tag_dir = fs::path(out_dir) / tag;
  fs::create_directories(tag_dir);
  fs::remove(tag_dir / ckpt::kMetadataFile);  // incomplete from here until the new one lands
  const fs::path shard = tag_dir / ckpt::shard_file_name(0);
  {
    ckpt::ShardWriter w(shard.string(), /*rank=*/0, /*world_size=*/1, params.size(), bytes);
    for (auto& p : params) fill(w, p);
    w.finish({}, fresh_rng_state(), at::empty({0}, at::kByte), {{"imported_from", "deepspeed"}});
  }
  ckpt::Metadata m;
  m.world_size = 1;
  m.stage = 0;
  m.global_step = step;
  m.micro_steps = step * o.gradient_accumulation_steps;
  for (const auto& p : params) m.params.push_back({p.name, true, p.shape});
  m.shards.push_back(
      {ckpt::shard_file_name(0), fs::file_size(shard), ckpt::fnv64_file(shard.string())});
  ckpt::write_metadata((tag_dir / ckpt::kMetadataFile).string(), m);
  {
    const std::string line = tag + "\n";
    ckpt::RecordWriter latest((fs::path(out_dir) / ckpt::kLatestFile).string());
    latest.bytes(line.data(), line.size());
    latest.commit();
  }
  return tag;
}

}  // namespace

std::string import_deepspeed_universal(const std::string& universal_dir, const std::string& out_dir,
                                       const DeepSpeedImportOptions& options) {
  DeepSpeedUniversal ds(universal_dir);
  std::vector<Param> params = renamed(ds.names(), options);
  // Every parameter's step must agree (one optimizer step count): checked before anything is
  // written. A bad value file found later throws before the metadata exists, so the tag is never
  // complete (and the shard's temporary file is removed).
  int64_t step = -1;
  std::string step_of;
  uint64_t bytes = 0;  // about the tensor data to write: the value files' sizes
  for (auto& p : params) {
    for (const char* state : DeepSpeedUniversal::kStates) {
      std::error_code ec;
      const auto n = fs::file_size(
          fs::path(universal_dir) / "zero" / p.source / (std::string(state) + ".pt"), ec);
      if (!ec) bytes += n;
    }
    const int64_t saved = ds.step(p.source);
    // A stage-3 run's universal checkpoint has no step.pt and flat values: the caller says both.
    ZT_CHECK(saved >= 0 || options.step >= 0, "DeepSpeed universal checkpoint ", universal_dir,
             ": parameter ", p.source,
             " has no step.pt (a ZeRO stage-3 run's, whose values are flat too): give the step "
             "(DeepSpeed's global_steps) and the shapes (zero_to_fp32's weights), e.g. "
             "zt-from-deepspeed --step N --shapes-from WEIGHTS");
    ZT_CHECK(saved >= 0 || options.shapes.count(p.source), "DeepSpeed universal checkpoint ",
             universal_dir, ": parameter ", p.source,
             " has no step.pt, so its values are flat, and no shape was given for it");
    const int64_t s = saved >= 0 ? saved : options.step;
    ZT_CHECK(step < 0 || s == step, "DeepSpeed universal checkpoint ", universal_dir,
             ": parameter ", p.source, " was stepped ", s, " times, ", step_of, " ", step);
    step = s;
    step_of = p.source;
  }
  const std::string tag = options.tag.empty() ? "global_step" + std::to_string(step) : options.tag;
  write_checkpoint(out_dir, tag, params, step, bytes, options, [&](ckpt::ShardWriter& w, Param& p) {
    auto given = options.shapes.find(p.source);
    const at::Tensor master =
        ds.read(p.source, "fp32", given != options.shapes.end() ? &given->second : nullptr);
    p.shape = master.sizes().vec();
    w.buffer(p.numel(), 0, p.numel(), {{p.name, 0, p.numel()}});
    w.tensor(master.reshape({-1}));
    w.state_count(3);
    for (const char* state : {"exp_avg", "exp_avg_sq"}) {
      w.state_key(state);
      w.tensor(ds.read(p.source, state, &p.shape).reshape({-1}));
    }
    w.state_key("step");
    w.tensor(at::scalar_tensor(step, at::kLong));
  });
  ZT_LOG_INFO("imported DeepSpeed universal checkpoint ", universal_dir, " (", params.size(),
              " parameters, step ", step, ") as ", (fs::path(out_dir) / tag).string());
  return tag;
}

std::string import_deepspeed_weights(const std::string& weights_path, const std::string& out_dir,
                                     const DeepSpeedImportOptions& options) {
  std::map<std::string, at::Tensor> values = read_state_dict_file(weights_path);
  std::vector<std::string> names;
  for (const auto& [name, t] : values) {
    ZT_CHECK(at::isFloatingType(t.scalar_type()), "weights ", weights_path, ": ", name, " holds ",
             t.scalar_type(), " values, expected floating point");
    names.push_back(name);
  }
  std::vector<Param> params = renamed(names, options);
  uint64_t bytes = 0;
  for (auto& p : params) {
    p.shape = values.at(p.source).sizes().vec();
    bytes += static_cast<uint64_t>(p.numel()) * sizeof(float);
  }
  const std::string tag = options.tag.empty() ? "global_step0" : options.tag;
  write_checkpoint(out_dir, tag, params, /*step=*/0, bytes, options,
                   [&](ckpt::ShardWriter& w, Param& p) {
                     w.buffer(p.numel(), 0, p.numel(), {{p.name, 0, p.numel()}});
                     w.tensor(values.at(p.source).to(at::kFloat).contiguous().reshape({-1}));
                     // The state of an optimizer that has not stepped: its count alone.
                     w.state_count(1);
                     w.state_key("step");
                     w.tensor(at::scalar_tensor(int64_t{0}, at::kLong));
                   });
  ZT_LOG_INFO("imported weights ", weights_path, " (", params.size(), " parameters) as ",
              (fs::path(out_dir) / tag).string());
  return tag;
}

}  // namespace zt
