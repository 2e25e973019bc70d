#include "train/checkpointing.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "base/env_vars.h"
#include "base/error.h"
#include "base/logging.h"
#include "core/checkpoint/async_checkpoint.h"
#include "core/checkpoint/checkpoint.h"
#include "core/checkpoint/format.h"
#include "core/zero/master_store.h"
#include "data/batch_sampler.h"

namespace zt {
namespace fs = std::filesystem;

namespace {

// Client-state keys saved with every tag (core/checkpoint/checkpoint.h, ClientState).
constexpr const char* kStepKey = "step";
constexpr const char* kSamplerKey = "sampler";

int env_int(const char* name) {
  const char* v = ::zt::env::get(name);
  return v == nullptr ? 0 : std::atoi(v);
}

// Where to resume from, in the order tried: the tag named in `latest`, then every other
// complete tag, newest first (load_fallback previous walks on down this list).
std::vector<std::string> resume_candidates(const std::string& dir) {
  std::vector<std::string> tags;
  if (fs::exists(fs::path(dir) / ckpt::kLatestFile)) tags.push_back(latest_checkpoint_tag(dir));
  for (const auto& tag : complete_checkpoint_tags(dir)) {
    if (std::find(tags.begin(), tags.end(), tag) == tags.end()) tags.push_back(tag);
  }
  return tags;
}

}  // namespace

bool restarted_by_launcher() {
  return env_int(env::kRestartCount) > 0 || env_int(env::kTorchElasticRestartCount) > 0;
}

Checkpointing::Checkpointing(Training& t, CheckpointingOptions options)
    : t_(t),
      options_(std::move(options)),
      dir_(options_.dir.empty() ? t.config.checkpoint.save_dir : options_.dir) {
  if (!enabled() || !t_.config.checkpoint.writer.decoupled) return;
  async_ = std::make_unique<AsyncCheckpointer>(*t_.engine);
}

Checkpointing::~Checkpointing() = default;

int64_t Checkpointing::resume() {
  if (!enabled()) return 0;
  if (options_.fresh) {
    if (!restarted_by_launcher()) {
      ZT_LOG_INFO("checkpoint: starting fresh (--fresh); not resuming from ", dir_);
      return 0;
    }
    ZT_LOG_INFO("checkpoint: restarted by the launcher, so --fresh is ignored: resuming");
  }
  const std::vector<std::string> tags = resume_candidates(dir_);
  if (tags.empty()) {
    ZT_LOG_INFO("checkpoint: none in ", dir_, "; training from step 1");
    return 0;
  }
  const bool fallback = t_.config.checkpoint.load_fallback == LoadFallback::kPrevious;
  for (size_t i = 0; i < tags.size(); ++i) {
    try {
      const auto start = std::chrono::steady_clock::now();
      const int64_t step = load(tags[i]);
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count();
      ZT_LOG_INFO("checkpoint: resumed from ", (fs::path(dir_) / tags[i]).string(), " at step ",
                  step, " (loaded in ", static_cast<int64_t>(ms), " ms)",
                  i > 0 ? " (checkpoint.load_fallback previous: " + tags[0] + " was unusable)"
                        : std::string());
      last_saved_ = step;
      return step;
    } catch (const Error& e) {
      // load_checkpoint validates everything before it touches the engine, and every rank reads
      // the same files, so every rank throws here alike and the engine is still as it was.
      if (!fallback || i + 1 == tags.size()) throw;
      ZT_LOG_WARN("checkpoint: ", e.message(), "; checkpoint.load_fallback previous: trying ",
                  tags[i + 1]);
    }
  }
  return 0;  // unreachable: the last candidate returned or threw
}

int64_t Checkpointing::load(const std::string& tag) {
  const ClientState client = load_checkpoint(*t_.engine, dir_, tag);
  auto step_it = client.find(kStepKey);
  const int64_t step =
      step_it != client.end() ? std::stoll(step_it->second) : t_.engine->global_step();
  auto sampler_it = client.find(kSamplerKey);
  if (t_.loader && sampler_it != client.end()) {
    const data::SamplerState s = data::SamplerState::parse(sampler_it->second);
    t_.loader->load_sampler_state(sampler_it->second);
    if (s.world_size != t_.comm->size()) {
      // Resharded to another world size: the epoch's untaken samples are planned again for it
      // (data/batch_sampler.h), so none is seen twice or skipped across the resize.
      ZT_LOG_INFO("checkpoint: ", tag, " was saved by ", s.world_size, " ranks, this run has ",
                  t_.comm->size(), ": epoch ", s.epoch, " goes on with its ",
                  t_.loader->sampler().num_batches(), " remaining batches per rank replanned");
    }
  } else if (t_.loader) {
    ZT_LOG_WARN("checkpoint: ", tag, " holds no sampler position; the data order starts over");
  }
  return step;
}

void Checkpointing::save(int64_t step) {
  const std::string tag = t_.config.checkpoint.tag_prefix + std::to_string(step);
  CheckpointOptions co;
  co.keep_last = t_.config.checkpoint.keep_last;
  co.config_json = t_.config.to_json(/*pretty=*/false);
  ClientState client{{kStepKey, std::to_string(step)}};
  if (t_.loader) client[kSamplerKey] = t_.loader->sampler_state();
  const auto start = std::chrono::steady_clock::now();
  if (async_) {
    async_->save(dir_, tag, client, co);
  } else {
    save_checkpoint(*t_.engine, dir_, tag, client, co);
  }
  const double stall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Training stood still this long for the save (the whole write, or the snapshot).
  ZT_LOG_INFO("checkpoint: ", tag, async_ ? " snapshotted" : " written", " in ", stall, " s",
              async_ ? "; the write goes on in the background" : "");
  last_saved_ = step;
}

bool Checkpointing::after_step(int64_t step, bool last) {
  if (!enabled()) return false;
  if (async_ && async_->poll()) {  // every rank has written the background save: committed
    ZT_LOG_INFO("checkpoint: background write took ", async_->last_write_seconds(),
                " s on this rank",
                t_.engine->master_store().swap_directory().empty()
                    ? std::string()
                    : "; steps waited " + std::to_string(async_->last_held_seconds()) +
                          " s for it to read the NVMe swap files");
  }
  const int64_t every = t_.config.checkpoint.save_interval;
  const bool saving = (every > 0 && step % every == 0) || (last && last_saved_ != step);
  if (saving) save(step);
  if (last && async_) async_->wait();  // the program ends with its last checkpoint committed
  return saving;
}

}  // namespace zt
