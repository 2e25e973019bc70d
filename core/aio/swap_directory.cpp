#include "core/aio/swap_directory.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "base/env_vars.h"
#include "base/error.h"
#include "base/logging.h"
#include "base/remove_tree.h"

namespace zt::aio {
namespace {

// Ranks of this machine, which share nvme_path's filesystem.
int64_t ranks_on_this_machine() {
  for (const char* name : {env::kLocalWorldSize, env::kOmpiLocalSize}) {
    const char* v = ::zt::env::get(name);
    if (v != nullptr && std::atoll(v) > 0) return std::atoll(v);
  }
  return 1;
}

}  // namespace

SwapDirectory::SwapDirectory(const std::string& key, const std::string& p, const std::string& what,
                             int rank, int64_t needed, const std::string& purpose) {
  struct stat st {};
  ZT_CHECK(::stat(p.c_str(), &st) == 0, key, " ", p, " does not exist (", std::strerror(errno),
           "); ", purpose, " needs ", needed, " bytes there for this rank");
  ZT_CHECK(S_ISDIR(st.st_mode), key, " ", p, " is not a directory; ", purpose, " needs ", needed,
           " bytes in a directory there for this rank");
  const std::string dir =
      (std::filesystem::path(p) /
       ("zerotorch_" + what + "_rank" + std::to_string(rank) + "_pid" + std::to_string(::getpid())))
          .string();
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    const int err = errno;
    ZT_THROW(key, " ", p, " is not writable (", std::strerror(err), "); ", purpose, " needs ",
             needed, " bytes there for this rank");
  }
  struct statvfs fs {};
  if (::statvfs(p.c_str(), &fs) != 0) {
    const int err = errno;
    ::rmdir(dir.c_str());
    ZT_THROW(key, " ", p, ": statvfs failed: ", std::strerror(err));
  }
  const int64_t free_bytes = static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_frsize);
  const int64_t ranks = ranks_on_this_machine();
  if (free_bytes < needed * ranks) {
    ::rmdir(dir.c_str());
    ZT_THROW(key, " ", p, " is too small: ", purpose, " needs ", needed * ranks, " bytes (", needed,
             " per rank x ", ranks, " rank(s) on this machine), the filesystem has ", free_bytes,
             " free");
  }
  dir_ = dir;
}

SwapDirectory::~SwapDirectory() {
  // A destructor cannot fail: a leftover file only costs disk space, and says so.
  if (dir_.empty()) return;
  const std::string error = remove_tree(dir_);
  if (!error.empty()) ZT_LOG_WARN("NVMe offload: ", error);
}

}  // namespace zt::aio
