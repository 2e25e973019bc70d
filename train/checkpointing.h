#pragma once
// zt::Checkpointing: periodic checkpoints and automatic resume, driven by the config's
// `checkpoint` block (docs/DESIGN.md, Checkpoint), for any training loop built on zt::initialize.
//
//   zt::Checkpointing ckpt(t, {.fresh = fresh_flag});
//   for (int64_t step = ckpt.resume() + 1; step <= steps; ++step) {
//     ... one optimizer step ...
//     ckpt.after_step(step, step == steps);
//   }
//
// checkpoint.save_dir     where tags go (empty: no checkpoints, no resume)
// checkpoint.save_interval  a save after every step that is a multiple of it (optimizer steps,
//                         as the program counts them), and after the last step; 0: the last only
// checkpoint.keep_last    complete tags kept (newest first); 0: all
// checkpoint.tag_prefix   tags are <tag_prefix><step> (DeepSpeed's "global_step<N>")
// checkpoint.load_fallback  none: a corrupt or partial latest tag stops the program with one
//                         line naming the file; previous: the newest complete tag before it loads
// checkpoint.writer.decoupled  saves are snapshotted and written in the background
//                         (core/checkpoint/async_checkpoint.h); after_step() commits them once
//                         every rank has written, and the last step's save is committed before
//                         after_step() returns
//
// resume(): unless `fresh`, when save_dir holds a checkpoint (the tag named in `latest`, else the
// newest complete tag) it loads it: parameters, optimizer state, loss scaler, LR schedule (the
// step counters), torch's CPU generator and the training BatchStream's sampler position
// (core/checkpoint/checkpoint.h). The log names the tag and the step. `fresh` is ignored on a
// restart by the launcher (ZT_RESTART_COUNT or TORCHELASTIC_RESTART_COUNT > 0): a restarted
// group always resumes, so `ztrun --max-restarts` loses at most save_interval steps.
//
// Every call is collective: every rank calls resume() once and after_step() after every step.

#include <cstdint>
#include <memory>
#include <string>

#include "train/initialize.h"

namespace zt {

struct CheckpointingOptions {
  bool fresh = false;    // do not resume (first launch only, see above)
  std::string dir = {};  // overrides checkpoint.save_dir when not empty
};

class AsyncCheckpointer;

class Checkpointing {
 public:
  Checkpointing(Training& t, CheckpointingOptions options = {});
  ~Checkpointing();

  // Loads the checkpoint to resume from (see above); returns the step it was saved after (0:
  // nothing loaded, training starts at step 1).
  int64_t resume();
  // After optimizer step `step`: saves when it is a multiple of save_interval or `last`.
  // Returns true when it saved.
  bool after_step(int64_t step, bool last);

  const std::string& dir() const { return dir_; }
  bool enabled() const { return !dir_.empty(); }
  // The background saver (checkpoint.writer.decoupled), or null.
  const AsyncCheckpointer* async_saver() const { return async_.get(); }

 private:
  // Loads `tag`; returns the step saved with it.
  int64_t load(const std::string& tag);
  void save(int64_t step);

  Training& t_;
  CheckpointingOptions options_;
  std::string dir_;
  int64_t last_saved_ = -1;
  std::unique_ptr<AsyncCheckpointer> async_;
};

// True in a process the launcher restarted (ZT_RESTART_COUNT or TORCHELASTIC_RESTART_COUNT > 0).
bool restarted_by_launcher();

}  // namespace zt
