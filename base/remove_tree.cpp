#include "base/remove_tree.h"

#include <cerrno>
#include <cstring>
#include <ftw.h>
#include <mutex>
#include <sys/stat.h>
#include <unistd.h>

namespace zt {
namespace {

// nftw's callback takes no user pointer: the first failure of the walk in progress goes here,
// under a lock held for the whole walk.
std::mutex walk_mu;
std::string* walk_error = nullptr;

int remove_entry(const char* path, const struct stat* /*st*/, int type, struct FTW* /*ftw*/) {
  // FTW_DEPTH: a directory comes after its contents (FTW_DP); FTW_PHYS: a link is FTW_SL or
  // FTW_SLN and is unlinked itself.
  const int r = (type == FTW_DP || type == FTW_D) ? ::rmdir(path) : ::unlink(path);
  if (r != 0 && errno != ENOENT && walk_error->empty()) {
    *walk_error = std::string("cannot remove ") + path + ": " + std::strerror(errno);
  }
  return 0;  // go on: remove what can be removed
}

}  // namespace

std::string remove_tree(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    return errno == ENOENT ? "" : "cannot remove " + path + ": " + std::strerror(errno);
  }
  if (!S_ISDIR(st.st_mode)) {
    return ::unlink(path.c_str()) == 0 || errno == ENOENT
               ? ""
               : "cannot remove " + path + ": " + std::strerror(errno);
  }
  std::string error;
  std::lock_guard<std::mutex> lock(walk_mu);
  walk_error = &error;
  const int r = ::nftw(path.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  walk_error = nullptr;
  if (r != 0 && error.empty()) error = "cannot walk " + path + ": " + std::strerror(errno);
  return error;
}

}  // namespace zt
