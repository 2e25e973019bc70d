#include "launcher/port.h"

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <netinet/in.h>
#include <random>
#include <string>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
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

// Opens and locks the port's file in `dir` without blocking; -1 when another holder has it or the
// file cannot be opened.
int lock_port_file(const std::string& dir, int port) {
  const std::string path = dir + "/" + std::to_string(port) + ".lock";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

int ephemeral_port_start() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0, high = 0;
  if (in >> low >> high && low > 0) return low;
  return 32768;
}

PortReservation PortReservation::draw() {
  const int high = std::min(kStandalonePortHigh, ephemeral_port_start());
  const std::string dir = "/tmp/zerotorch-ports-" + std::to_string(::getuid());
  ::mkdir(dir.c_str(), 0700);  // exists already but for the first launcher; checked below
  struct stat st {};
  const bool usable = high - kStandalonePortLow >= 100 && ::stat(dir.c_str(), &st) == 0 &&
                      S_ISDIR(st.st_mode) && st.st_uid == ::getuid();
  if (usable) {
    std::mt19937 gen(std::random_device{}());
    std::uniform_int_distribution<int> pick(kStandalonePortLow, high - 1);
    for (int tries = 0; tries < 500; ++tries) {
      const int port = pick(gen);
      const int lock = lock_port_file(dir, port);
      if (lock < 0) continue;  // another launcher holds it
      const int fd = bind_any(port);
      if (fd >= 0) {
        ::close(fd);
        return PortReservation(port, lock);
      }
      ::close(lock);
    }
  }
  return PortReservation(find_free_port(), -1);
}

PortReservation::PortReservation(PortReservation&& other) noexcept
    : port_(other.port_), lock_fd_(other.lock_fd_) {
  other.lock_fd_ = -1;
}

PortReservation::~PortReservation() {
  if (lock_fd_ >= 0) ::close(lock_fd_);  // closing the file releases its lock
}

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
