#include "launcher/line_socket.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/error.h"

namespace zt::launcher {

void send_line(int fd, const std::string& line) {
  const std::string data = line + "\n";
  size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n > 0) {
      off += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EINTR || errno == EAGAIN)) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, 100);
    } else {
      return;  // the peer is gone; its reader side reports that
    }
  }
}

int try_connect(const std::string& host, int port, int timeout_ms) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0) return -1;
  int fd = -1;
  for (addrinfo* ai = res; ai && fd < 0; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    int rc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int err = ETIMEDOUT;
      socklen_t len = sizeof(err);
      if (::poll(&p, 1, timeout_ms) == 1) ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      rc = err == 0 ? 0 : -1;
    }
    // With nobody listening on a local port, the kernel can pick that very port as the source and
    // "connect" the socket to itself (TCP simultaneous open); the socket then holds the port that
    // node 0 is about to listen on. It counts as not yet connected, and a reset (linger 0) rather
    // than a FIN handshake frees the port at once.
    if (rc == 0 && is_self_connection(fd)) {
      const linger reset{1, 0};
      ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
      rc = -1;
    }
    if (rc != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(res);
  return fd;
}

bool is_self_connection(int fd) {
  sockaddr_storage local{};
  sockaddr_storage peer{};
  socklen_t local_len = sizeof(local);
  socklen_t peer_len = sizeof(peer);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0 ||
      ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) {
    return false;
  }
  return local_len == peer_len && std::memcmp(&local, &peer, local_len) == 0;
}

namespace {

int listen_addr(const sockaddr* addr, socklen_t len, int family, int backlog) {
  const int fd = ::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd, addr, len) != 0 || ::listen(fd, backlog) != 0) {
    const int err = errno;
    ::close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

}  // namespace

int listen_on(int port, int backlog) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  return listen_addr(reinterpret_cast<sockaddr*>(&addr), sizeof(addr), AF_INET, backlog);
}

int listen_at(const std::string& host, int port, int backlog) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0) {
    errno = EADDRNOTAVAIL;
    return -1;
  }
  int fd = -1;
  int err = EADDRNOTAVAIL;
  for (addrinfo* ai = res; ai && fd < 0; ai = ai->ai_next) {
    fd = listen_addr(ai->ai_addr, ai->ai_addrlen, ai->ai_family, backlog);
    if (fd < 0) err = errno;
  }
  ::freeaddrinfo(res);
  if (fd < 0) errno = err;
  return fd;
}

bool read_lines(int fd, std::string* inbuf, std::vector<std::string>* lines) {
  char buf[4096];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return true;
    if (n <= 0) return false;
    inbuf->append(buf, static_cast<size_t>(n));
    for (size_t nl; (nl = inbuf->find('\n')) != std::string::npos;) {
      lines->push_back(inbuf->substr(0, nl));
      inbuf->erase(0, nl + 1);
    }
  }
}

WakePipe::WakePipe() {
  ZT_CHECK(::pipe2(fds_, O_CLOEXEC | O_NONBLOCK) == 0, "pipe2() failed: ", std::strerror(errno));
}

WakePipe::~WakePipe() {
  for (int fd : fds_) ::close(fd);
}

void WakePipe::signal() const {
  const char byte = 1;
  [[maybe_unused]] ssize_t n = ::write(fds_[1], &byte, 1);
}

void WakePipe::drain() const {
  char buf[64];
  while (::read(fds_[0], buf, sizeof(buf)) > 0) {
  }
}

}  // namespace zt::launcher
