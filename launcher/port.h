#pragma once
// TCP ports for the rendezvous. ztrun never listens itself (rank 0's c10d TCPStore does); it only
// checks up front, so that a taken port is a clear error instead of every rank timing out.

namespace zt::launcher {

// A port the kernel reports free right now (bind to port 0, read it back, close). Another
// process may take it before rank 0 binds; that window is accepted, as torchrun accepts it.
int find_free_port();

// Throws zt::Error naming the port when something on this host already listens on it. Sockets in
// TIME_WAIT (a previous run's store) do not count, matching a listener that sets SO_REUSEADDR.
// With grace_s > 0 (a restart: the failed attempt's rank 0 may still be closing its store) it
// waits up to that long for the port to come free before throwing.
void check_port_free(int port, double grace_s = 0);

// The grace a restart gives the previous attempt's store to close.
constexpr double kRestartPortGraceS = 10.0;

}  // namespace zt::launcher
