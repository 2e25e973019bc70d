#pragma once
// SwapDirectory: the per-rank directory NVMe offload keeps its scratch files in, under the
// config's nvme_path:
//
//   <nvme_path>/zerotorch_<what>_rank<r>_pid<p>/
//
// Made only after nvme_path was checked: it exists, is a directory, takes a new directory
// (writable, also for root on a read-only filesystem) and its filesystem has room for this rank's
// bytes times the ranks of this machine that share it (LOCAL_WORLD_SIZE, or OpenMPI's
// OMPI_COMM_WORLD_LOCAL_SIZE). Each failure is one zt::Error naming the config key, the path and
// the bytes needed. The destructor removes the directory and everything in it (the files are
// scratch space of this run; checkpoints are written elsewhere).

#include <cstdint>
#include <string>

namespace zt::aio {

class SwapDirectory {
 public:
  // key: the config key that named path (for messages); what: the directory's kind ("optimizer",
  // "params"); purpose: what needs the bytes, for messages ("NVMe optimizer offload").
  SwapDirectory(const std::string& key, const std::string& path, const std::string& what, int rank,
                int64_t needed_bytes, const std::string& purpose);
  ~SwapDirectory();
  SwapDirectory(const SwapDirectory&) = delete;
  SwapDirectory& operator=(const SwapDirectory&) = delete;

  const std::string& path() const { return dir_; }

 private:
  std::string dir_;
};

}  // namespace zt::aio
