#pragma once
// Checkpoints written in the background (DeepSpeed's checkpoint.writer.decoupled): the same files
// as zt::save_checkpoint (core/checkpoint/checkpoint.h), byte for byte, without stopping
// training for the write.
//
//   zt::AsyncCheckpointer saver(engine);
//   ... step ...
//   saver.save("ckpts", "global_step100", client, options);  // snapshot, returns
//   ... steps; after each: saver.poll();                      // commits once all ranks wrote
//   saver.wait();                                             // before the program ends
//
// save() (collective, at a step boundary) first finishes the save in flight, if any (at most one
// is), then copies what the shard holds (masters, optimizer state, frozen parameters, the CPU and
// device generators, the client state) into host memory kept across saves, and hands it to a
// thread that writes, fsyncs and renames this rank's shard and checksums it. poll() (collective;
// cheap: one all-gather of four integers per rank while a save is in flight, nothing otherwise)
// commits the save when every rank's write is complete: rank 0 writes metadata.ztm with every
// shard's size and checksum, then `latest`, as the synchronous save does. Until then `latest` names
// the previous tag, so a rank killed during a background write leaves it loadable; the half-written
// tag has no metadata and no load accepts it.
//
// A write that fails (disk full) makes the next poll() or wait() throw on every rank, naming the
// tag and the rank, with `latest` unchanged. Destroying the saver with a save in flight waits for
// its write but commits nothing (no collective in a destructor): call wait() to finish a save.
//
// Host memory: one snapshot of this rank's shard state (the masters and the optimizer state laid
// out like them: 12 bytes per stepped parameter for AdamW), reused by every save. With the state
// in NVMe swap files (offload_optimizer nvme) nothing of it is copied: the write streams the
// masters and states from the store's files through two 16 MiB buffers (O_DIRECT, the engine's
// aio settings), and until it has read a buffer's files the step that would rewrite them waits
// (MasterStore::set_write_gate), buffer by buffer in the order both go. Training continues
// through the next forward and backward; the next step stalls only where it catches up with the
// read.

#include <cstdint>
#include <future>
#include <memory>
#include <string>

#include "core/checkpoint/checkpoint.h"

namespace zt {

class AsyncCheckpointer {
 public:
  explicit AsyncCheckpointer(Engine& engine);
  ~AsyncCheckpointer();
  AsyncCheckpointer(const AsyncCheckpointer&) = delete;
  AsyncCheckpointer& operator=(const AsyncCheckpointer&) = delete;

  void save(const std::string& dir, const std::string& tag, const ClientState& client = {},
            const CheckpointOptions& options = {});
  // Commits the save in flight if every rank has written it; true when it committed.
  bool poll();
  // Waits for the save in flight and commits it.
  void wait();
  bool in_flight() const;
  // Seconds the last save() spent before returning (the stall training sees), and the last
  // background write's duration on this rank.
  double last_stall_seconds() const { return stall_s_; }
  double last_write_seconds() const { return write_s_; }
  // With the state in NVMe swap files: how long steps waited for the last committed write to
  // read the files (the rest of the stall that save's write caused); 0 otherwise.
  double last_held_seconds() const { return held_s_; }

 private:
  struct FileGate;
  struct Snapshot;
  struct Pending;
  // Ends the save in flight's bookkeeping (and the step's gate on the store's files).
  void release();
  Engine& engine_;
  std::unique_ptr<Snapshot> snapshot_;
  std::unique_ptr<Pending> pending_;
  double stall_s_ = 0, write_s_ = 0, held_s_ = 0;
};

}  // namespace zt
