#pragma once
// AioFile: one file opened for NVMe offload I/O, twice: with O_DIRECT (bypassing the page cache,
// which would otherwise hold a second copy of everything offloaded), and buffered, for the parts
// of a transfer O_DIRECT cannot take (an unaligned tail, an unaligned buffer or offset). When the
// filesystem refuses O_DIRECT (tmpfs, some overlay filesystems), every transfer is buffered and
// one log line says so.
//
// Contract: a transfer whose buffer address and file offset are aligned to aio::kAlignment goes
// through the direct descriptor for its aligned body and the buffered one for the rest; the two
// never touch the same file page in one transfer.

#include <cstdint>
#include <string>

namespace zt::aio {

class AioFile {
 public:
  // create: open read-write, creating the file (mode 0600) when missing; otherwise read-only.
  // try_direct false: buffered only (what a filesystem refusing O_DIRECT gets).
  // Throws zt::Error naming the path and errno's text when the file cannot be opened.
  AioFile(std::string path, bool create, bool try_direct = true);
  ~AioFile();
  AioFile(const AioFile&) = delete;
  AioFile& operator=(const AioFile&) = delete;

  const std::string& path() const { return path_; }
  bool direct() const { return direct_fd_ >= 0; }
  int direct_fd() const { return direct_fd_; }  // -1 when the filesystem refused O_DIRECT
  int buffered_fd() const { return buffered_fd_; }
  // Sets the file's size (ftruncate); names the path on failure.
  void truncate(int64_t bytes);

 private:
  std::string path_;
  int direct_fd_ = -1;
  int buffered_fd_ = -1;
};

}  // namespace zt::aio
