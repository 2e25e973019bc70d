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

// A listening socket on `port` of every local address (the wildcard), or -1 with errno set.
int listen_on(int port, int backlog);

// A listening socket on `host`:`port` only, or -1 with errno set (EADDRNOTAVAIL: `host` is not an
// address of this machine; EADDRINUSE: the port is taken).
int listen_at(const std::string& host, int port, int backlog);

// Reads what `fd` has and appends the complete lines to `lines` (keeping a partial one in
// `inbuf`); false once the peer closed the connection or it failed.
bool read_lines(int fd, std::string* inbuf, std::vector<std::string>* lines);

}  // namespace zt::launcher
