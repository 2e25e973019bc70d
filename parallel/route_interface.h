#pragma once
// The local network interface the kernel routes traffic to a host through, found without sending
// anything: a UDP socket connect()ed to the host gets the source address the routing table picks
// (getsockname), and getifaddrs names the interface holding that address.
//
// gloo binds to it (gloo_communicator.h), so a rank listens where its peers can reach it whatever
// this machine's hostname resolves to: Debian maps the hostname to 127.0.1.1 in /etc/hosts, and
// ProcessGroupGloo::createDefaultDevice() then binds loopback, and a peer on another node gets
// "connectFullMesh failed ... Connection refused".
//
//   RouteInterface r = interface_towards("10.0.0.1", 29500);   // {"eth0", "10.0.0.2"}

#include <string>

namespace zt::dist {

struct RouteInterface {
  std::string name;           // e.g. "eth0", "lo"
  std::string local_address;  // this host's address on it, e.g. "10.0.0.2"
};

// `host`: a name or an IPv4/IPv6 literal. Throws zt::Error naming the host when it does not
// resolve, when no route reaches it, or when no interface holds the source address.
RouteInterface interface_towards(const std::string& host, int port);

}  // namespace zt::dist
