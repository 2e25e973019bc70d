#pragma once
// TCP ports for the rendezvous. ztrun never listens itself (rank 0's c10d TCPStore does); it only
// checks up front, so that a taken port is a clear error instead of every rank timing out.

namespace zt::launcher {

// A port the kernel reports free right now (bind to port 0, read it back, close). Another
// process may take it before rank 0 binds.
int find_free_port();

// The rendezvous port of a --standalone job, held for the launcher's lifetime. Between the draw
// and rank 0's bind another socket could take a port the kernel reported free, and the kernel
// hands out ports of its ephemeral range (net.ipv4.ip_local_port_range) unasked: to every
// connect() and every bind to port 0, gloo's and OpenMPI's included. So the port is drawn at
// random below that range, in [kStandalonePortLow, kStandalonePortHigh) (clear of torch's
// defaults 29400 and 29500), bindable at the draw, and locked (flock on a file per port in
// /tmp/zerotorch-ports-<uid>) until this object goes, so that no other launcher on this host
// draws it meanwhile; jobs started side by side (a test suite's) never meet on one port. Where
// that range is inside the ephemeral one, or the lock directory cannot be made, it is
// find_free_port()'s port, unlocked.
class PortReservation {
 public:
  static PortReservation draw();
  PortReservation(PortReservation&& other) noexcept;
  PortReservation& operator=(PortReservation&&) = delete;
  PortReservation(const PortReservation&) = delete;
  ~PortReservation();
  int port() const { return port_; }
  bool locked() const { return lock_fd_ >= 0; }

 private:
  PortReservation(int port, int lock_fd) : port_(port), lock_fd_(lock_fd) {}
  int port_;
  int lock_fd_;
};
constexpr int kStandalonePortLow = 20000;
constexpr int kStandalonePortHigh = 29000;

// The first port of the kernel's ephemeral range (32768 where it cannot be read).
int ephemeral_port_start();

// Throws zt::Error naming the port when something on this host already listens on it. Sockets in
// TIME_WAIT (a previous run's store) do not count, matching a listener that sets SO_REUSEADDR.
// With grace_s > 0 (a restart: the failed attempt's rank 0 may still be closing its store) it
// waits up to that long for the port to come free before throwing.
void check_port_free(int port, double grace_s = 0);

// The grace a restart gives the previous attempt's store to close.
constexpr double kRestartPortGraceS = 10.0;

}  // namespace zt::launcher
