// Test support, preloaded into the processes of a test
// (LD_PRELOAD=libzt_test_hold_shard_writes.so): holds checkpoint shard writes back, so that a test
// can act while one is in flight (train on, kill the ranks, remove the directory) without a hook in
// the writer. It stands in front of the C library's open() and rename() and waits before touching a
// shard's temporary file (core/checkpoint/format.h: shard_rNNNNN.zts, written as
// shard_rNNNNN.zts.tmp):
//
//   ZT_TEST_HOLD_SHARD_CREATE_S=N   N seconds before the temporary file is created, so the whole
//                                   write (its reads of NVMe swap files too) starts late
//   ZT_TEST_HOLD_SHARD_RENAME_S=N   N seconds between the fsync and the rename onto the final
//                                   name: the shard stays under its temporary name
//
// Both are read at each call, so a test process can set and unset them while it runs. Every
// other call goes straight to the C library.

#include <cstdarg>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

namespace {

bool is_shard_temp(const char* path) {
  static const char kSuffix[] = ".zts.tmp";
  const size_t n = path != nullptr ? std::strlen(path) : 0, k = sizeof(kSuffix) - 1;
  return n > k && std::strcmp(path + n - k, kSuffix) == 0;
}

void hold(const char* variable) {
  const char* v = std::getenv(variable);
  const int seconds = v != nullptr ? std::atoi(v) : 0;
  if (seconds > 0) ::sleep(static_cast<unsigned>(seconds));
}

template <class F>
F next(const char* name) {
  return reinterpret_cast<F>(::dlsym(RTLD_NEXT, name));
}

}  // namespace

extern "C" int open(const char* path, int flags, ...) {
  mode_t mode = 0;
  if (__OPEN_NEEDS_MODE(flags)) {
    va_list args;
    va_start(args, flags);
    mode = va_arg(args, mode_t);
    va_end(args);
  }
  if ((flags & O_CREAT) != 0 && is_shard_temp(path)) hold("ZT_TEST_HOLD_SHARD_CREATE_S");
  static const auto real = next<int (*)(const char*, int, ...)>("open");
  return real(path, flags, mode);
}

extern "C" int rename(const char* from, const char* to) {
  if (is_shard_temp(from)) hold("ZT_TEST_HOLD_SHARD_RENAME_S");
  static const auto real = next<int (*)(const char*, const char*)>("rename");
  return real(from, to);
}
