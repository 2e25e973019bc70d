#include "base/fatal_exit.h"

#include <atomic>

namespace zt {
namespace {
std::atomic<FatalExitHook> g_hook{nullptr};
}  // namespace

void set_fatal_exit_hook(FatalExitHook hook) {
  g_hook.store(hook);
}

void call_fatal_exit_hook(int exit_code) {
  if (FatalExitHook hook = g_hook.load()) hook(exit_code);
}

}  // namespace zt
