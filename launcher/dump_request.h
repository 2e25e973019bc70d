#pragma once
// `ztrun --dump PID`: asks a running job for its flight recorder dumps (one
// <ZT_FLIGHT_DIR>/flight_r<rank>.json per rank, parallel/flight_recorder.h) without stopping it.
// It sends SIGUSR1 to the ztrun whose pid is PID; that ztrun's supervisor forwards it to every
// rank (supervisor.h), through mpirun and the rank shims under --transport mpi (mpirun forwards
// SIGUSR1 to its processes). A rank that does not handle SIGUSR1 (a program without zerotorch's
// recorder, or ZT_FLIGHT_BUFFER_SIZE=0) ends on it, as on any unhandled signal.

#include <string>

namespace zt::launcher {

// Returns ztrun's exit code: 0 when the signal was sent; throws zt::Error naming the pid when it
// cannot be (no such process, not ours).
int request_dump(const std::string& pid_text);

}  // namespace zt::launcher
