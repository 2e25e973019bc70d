// The TCP plumbing under NodeLink and the elastic rendezvous: a socket connected to itself.
#include "launcher/line_socket.h"

#include <arpa/inet.h>
#include <cstring>
#include <fstream>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <string>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "launcher/port.h"

namespace zt::launcher {
namespace {

sockaddr_in loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  return a;
}

// What the kernel does when a client's source port happens to be the port it dials and nobody
// listens there: the connect succeeds, to itself.
TEST(LineSocket, ASocketConnectedToItselfIsRecognised) {
  const int port = find_free_port();
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  const sockaddr_in a = loopback(port);
  ASSERT_EQ(::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof(a)), 0);
  EXPECT_TRUE(is_self_connection(fd));
  EXPECT_LT(listen_on(port, 1), 0);  // held this way, nobody can listen on the port
  ::close(fd);
}

TEST(LineSocket, AConnectionToAListenerIsNotASelfConnection) {
  const int port = find_free_port();
  const int listener = listen_on(port, 1);
  ASSERT_GE(listener, 0);
  const int fd = try_connect("127.0.0.1", port, 2000);
  ASSERT_GE(fd, 0);
  EXPECT_FALSE(is_self_connection(fd));
  ::close(fd);
  ::close(listener);
}

// In a network namespace of its own (root only; the port range is per namespace, so other tests
// are not touched), the kernel's only source port is the dialled one, as when node 1 dials node
// 0's launcher port before node 0 listens. try_connect must not hold that port: node 0 then
// listens on it. Runs in a child process, which alone enters the namespace.
TEST(LineSocket, DiallingAnUnheardPortNeverHoldsIt) {
  if (::geteuid() != 0) GTEST_SKIP() << "a network namespace needs root";
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (::unshare(CLONE_NEWNET) != 0) ::_exit(77);
    const int s = ::socket(AF_INET, SOCK_DGRAM, 0);
    ifreq lo{};
    std::strncpy(lo.ifr_name, "lo", IFNAMSIZ - 1);
    lo.ifr_flags = IFF_UP | IFF_LOOPBACK | IFF_RUNNING;
    if (s < 0 || ::ioctl(s, SIOCSIFFLAGS, &lo) != 0) ::_exit(77);
    const int port = 40001;
    std::ofstream("/proc/sys/net/ipv4/ip_local_port_range") << port << " " << port << "\n";
    for (int attempt = 0; attempt < 20; ++attempt) {
      const int fd = try_connect("127.0.0.1", port, 200);
      if (fd >= 0) ::_exit(1);  // "connected" with nobody listening: to itself
    }
    const int listener = listen_on(port, 1);
    ::_exit(listener >= 0 ? 0 : 2);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "no network namespace could be made";
  EXPECT_NE(WEXITSTATUS(status), 1) << "try_connect returned a socket connected to itself";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the dialled port could not be listened on afterwards";
}

}  // namespace
}  // namespace zt::launcher
