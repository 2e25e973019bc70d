#include "core/aio/aio_file.h"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>
#include <utility>

#include "base/error.h"
#include "base/logging.h"

namespace zt::aio {

AioFile::AioFile(std::string path, bool create, bool try_direct) : path_(std::move(path)) {
  const int flags = create ? (O_RDWR | O_CREAT) : O_RDONLY;
  buffered_fd_ = ::open(path_.c_str(), flags | O_CLOEXEC, 0600);
  ZT_CHECK(buffered_fd_ >= 0, "cannot open ", path_, (create ? " for writing" : " for reading"),
           ": ", std::strerror(errno));
  if (!try_direct) return;
  direct_fd_ = ::open(path_.c_str(), (flags & ~O_CREAT) | O_CLOEXEC | O_DIRECT);
  if (direct_fd_ < 0) {
    const int err = errno;
    // Said once per process: every file of a run lives on the same nvme_path.
    static std::atomic<bool> said{false};
    if (!said.exchange(true)) {
      ZT_LOG_WARN("aio: ", path_, ": the filesystem refuses O_DIRECT (", std::strerror(err),
                  "); NVMe offload files use buffered I/O through the page cache");
    }
  }
}

AioFile::~AioFile() {
  if (direct_fd_ >= 0) ::close(direct_fd_);
  if (buffered_fd_ >= 0) ::close(buffered_fd_);
}

void AioFile::truncate(int64_t bytes) {
  ZT_CHECK(::ftruncate(buffered_fd_, bytes) == 0, "cannot resize ", path_, " to ", bytes,
           " bytes: ", std::strerror(errno));
}

}  // namespace zt::aio
