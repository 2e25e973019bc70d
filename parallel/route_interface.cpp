#include "parallel/route_interface.h"

#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/error.h"

namespace zt::dist {
namespace {

std::string address_string(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (sa->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf, sizeof(buf));
  } else if (sa->sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, buf, sizeof(buf));
  }
  return buf;
}

}  // namespace

RouteInterface interface_towards(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port > 0 ? port : 9);
  const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
  ZT_CHECK(rc == 0 && res != nullptr, "rendezvous host '", host,
           "' does not resolve: ", ::gai_strerror(rc));
  std::string local, last_error = "no address";
  for (addrinfo* a = res; a != nullptr && local.empty(); a = a->ai_next) {
    const int fd = ::socket(a->ai_family, SOCK_DGRAM, 0);
    if (fd < 0) continue;
    // connect() on a UDP socket only asks the routing table; nothing is sent.
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
      sockaddr_storage me{};
      socklen_t len = sizeof(me);
      if (::getsockname(fd, reinterpret_cast<sockaddr*>(&me), &len) == 0)
        local = address_string(reinterpret_cast<sockaddr*>(&me));
    } else {
      last_error = std::strerror(errno);
    }
    ::close(fd);
  }
  ::freeaddrinfo(res);
  ZT_CHECK(!local.empty(), "no route to rendezvous host '", host, "': ", last_error);

  ifaddrs* ifs = nullptr;
  ZT_CHECK(::getifaddrs(&ifs) == 0, "getifaddrs failed: ", std::strerror(errno));
  RouteInterface out;
  for (ifaddrs* i = ifs; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    if (address_string(i->ifa_addr) == local) {
      out = {i->ifa_name, local};
      break;
    }
  }
  ::freeifaddrs(ifs);
  ZT_CHECK(!out.name.empty(), "the route to rendezvous host '", host, "' leaves from ", local,
           ", which no network interface holds");
  return out;
}

}  // namespace zt::dist
