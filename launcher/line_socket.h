#pragma once
// The plain TCP plumbing that the ztruns of several nodes talk through (node_link.h,
// elastic_rendezvous.h): text lines over non-blocking sockets.

#include <string>
#include <vector>

namespace zt::launcher {

// Sends `line` and a newline, waiting while the socket is full; a vanished peer is left to the
// reading side to notice.
void send_line(int fd, const std::string& line);

// One non-blocking connection attempt of up to `timeout_ms`; the connected non-blocking socket,
// or -1.
int try_connect(const std::string& host, int port, int timeout_ms);

// Whether the connected socket `fd` is connected to itself (same local and peer address and port).
bool is_self_connection(int fd);

// A listening socket on `port` of every local address (the wildcard), or -1 with errno set.
int listen_on(int port, int backlog);

// A listening socket on `host`:`port` only, or -1 with errno set (EADDRNOTAVAIL: `host` is not an
// address of this machine; EADDRINUSE: the port is taken).
int listen_at(const std::string& host, int port, int backlog);

// A self-pipe, non-blocking and close-on-exec: a thread blocked in poll() on read_fd() wakes when
// another thread calls signal(); drain() empties it. Throws zt::Error when no pipe can be made.
class WakePipe {
 public:
  WakePipe();
  ~WakePipe();
  WakePipe(const WakePipe&) = delete;
  WakePipe& operator=(const WakePipe&) = delete;
  int read_fd() const { return fds_[0]; }
  void signal() const;
  void drain() const;

 private:
  int fds_[2] = {-1, -1};
};

// Reads what `fd` has and appends the complete lines to `lines` (keeping a partial one in
// `inbuf`); false once the peer closed the connection or it failed.
bool read_lines(int fd, std::string* inbuf, std::vector<std::string>* lines);

}  // namespace zt::launcher
