#include "base/fatal_exit.h"

#include <atomic>

namespace zt {
namespace {
std::atomic<FatalExitHook> g_hook{nullptr};
std::atomic<FatalExitObserver> g_observers[kMaxFatalExitObservers];
}  // namespace

void add_fatal_exit_observer(FatalExitObserver observer) {
  for (auto& slot : g_observers) {
    FatalExitObserver empty = nullptr;
    if (slot.compare_exchange_strong(empty, observer)) return;
  }
}

void set_fatal_exit_hook(FatalExitHook hook) {
  g_hook.store(hook);
}

void call_fatal_exit_hook(int exit_code) {
  for (auto& slot : g_observers) {
    if (FatalExitObserver observer = slot.load()) observer();
  }
  if (FatalExitHook hook = g_hook.load()) hook(exit_code);
}

}  // namespace zt
