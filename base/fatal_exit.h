#pragma once
// The job-wide stop a failed rank calls for (fast collective abort). A backend that can end every
// rank at once registers it: the MPI runtime registers MPI_Abort, so mpirun stops the others at
// once and names this rank, instead of this rank hanging in MPI_Finalize while the others wait
// out the communicator timeout inside a collective. run_main (main_guard.h) calls it after
// printing the error line. Unset: nothing happens; the launcher (ztrun, torchrun, mpirun) stops
// the others when this rank exits non-zero.

namespace zt {

using FatalExitHook = void (*)(int exit_code);
void set_fatal_exit_hook(FatalExitHook hook);
// Runs every observer, then calls the registered hook, if any (MPI_Abort does not return).
void call_fatal_exit_hook(int exit_code);

// Something to record before the job stops (the flight recorder's dump). Observers run in the
// order added, before the hook, and must not throw; at most kMaxFatalExitObservers.
using FatalExitObserver = void (*)();
inline constexpr int kMaxFatalExitObservers = 4;
void add_fatal_exit_observer(FatalExitObserver observer);

}  // namespace zt
