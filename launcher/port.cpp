#include "launcher/port.h"

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <netinet/in.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

#include "base/error.h"

namespace zt::launcher {
namespace {

// Binds a fresh IPv4 socket to INADDR_ANY:port; returns the socket or -1 with errno set.
int bind_any(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ZT_CHECK(fd >= 0, "socket() failed: ", std::strerror(errno));
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int err = errno;
    ::close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

}  // namespace

int find_free_port() {
  const int fd = bind_any(0);
  ZT_CHECK(fd >= 0, "cannot bind a free port: ", std::strerror(errno));
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  const int rc = ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int err = errno;
  ::close(fd);
  ZT_CHECK(rc == 0, "getsockname() failed: ", std::strerror(err));
  return ntohs(addr.sin_port);
}

void check_port_free(int port, double grace_s) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(std::max(0.0, grace_s));
  for (;;) {
    const int fd = bind_any(port);
    if (fd >= 0) {
      ::close(fd);
      return;
    }
    const int err = errno;
    if (err == EADDRINUSE && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    ZT_CHECK(err != EADDRINUSE, "--master-port ", port,
             " is in use on this host; pick another port or use --standalone");
    ZT_THROW("cannot bind --master-port ", port, ": ", std::strerror(err));
  }
}

}  // namespace zt::launcher
