#include "parallel/job_store.h"

#include <arpa/inet.h>
#include <cerrno>
#include <ifaddrs.h>
#include <map>
#include <mutex>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sstream>
#include <sys/socket.h>
#include <unistd.h>
#include <vector>

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "base/error.h"
#include "base/logging.h"
#ifdef ZT_HAVE_MPI
#include "parallel/mpi_runtime.h"
#endif

namespace zt::dist {
namespace {

struct StoreCache {
  std::mutex mutex;
  std::map<std::string, c10::intrusive_ptr<c10d::Store>> stores;
  int generation = 0;
};

StoreCache& cache() {
  static StoreCache* c = new StoreCache();  // leaked: stores may be used during exit
  return *c;
}

c10::intrusive_ptr<c10d::Store> tcp_store(const std::string& host, int port, bool server,
                                          int world_size, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(port);
  opts.isServer = server;
  opts.numWorkers = world_size;
  opts.waitWorkers = false;
  opts.timeout = timeout;
  try {
    return c10::make_intrusive<c10d::TCPStore>(host, opts);
  } catch (const std::exception& e) {
    ZT_THROW_KIND(ErrorKind::kComm, "cannot ", server ? "host" : "reach",
                  " the rendezvous store at ", host, ":", port, ": ", first_line(e.what()));
  }
}

#ifdef ZT_HAVE_MPI
// This host's IPv4 addresses on interfaces that are up, loopback excluded.
std::vector<std::string> local_ipv4_addresses() {
  std::vector<std::string> out;
  ifaddrs* ifs = nullptr;
  if (::getifaddrs(&ifs) != 0) return out;
  for (ifaddrs* i = ifs; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    if ((i->ifa_flags & IFF_UP) == 0 || (i->ifa_flags & IFF_LOOPBACK) != 0) continue;
    char buf[INET_ADDRSTRLEN] = {0};
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof(buf));
    out.push_back(buf);
  }
  ::freeifaddrs(ifs);
  return out;
}

// True when a TCP connection to host:port is accepted within `wait` (the store server listens
// on every interface; the probe connection is closed at once).
bool accepts(const std::string& host, int port, std::chrono::milliseconds wait) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0) return false;
  bool ok = false;
  for (addrinfo* a = res; a != nullptr && !ok; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (fd < 0) continue;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
      ok = true;
    } else if (errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int err = 0;
      socklen_t len = sizeof(err);
      ok = ::poll(&p, 1, static_cast<int>(wait.count())) == 1 &&
           ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
    }
    ::close(fd);
  }
  ::freeaddrinfo(res);
  return ok;
}

// Rank 0 opens a server on a free port; MPI broadcasts "<host> <port> <ip>,<ip>...". Other ranks
// connect to the first candidate that accepts: loopback when the hostname is rank 0's, then the
// hostname, then each of rank 0's addresses. Hostnames alone mislead when two nodes share one
// (containers, network namespaces) or when it does not resolve elsewhere.
c10::intrusive_ptr<c10d::Store> mpi_bootstrapped_store(const Env& env,
                                                       std::chrono::milliseconds timeout) {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  c10::intrusive_ptr<c10d::Store> store;
  std::string address;
  if (env.rank == 0) {
    store = tcp_store("127.0.0.1", 0, /*server=*/true, env.world_size, timeout);
    int port = static_cast<c10d::TCPStore*>(store.get())->getPort();
    std::string ips;
    for (const auto& ip : local_ipv4_addresses()) ips += (ips.empty() ? "" : ",") + ip;
    address = std::string(host) + " " + std::to_string(port) + " " + ips;
  }
  address = mpi::broadcast_string_world(address, 0);
  std::istringstream fields(address);
  std::string server_host, ips;
  int port = 0;
  fields >> server_host >> port >> ips;
  ZT_INTERNAL_ASSERT(!server_host.empty() && port > 0, "bad store address '", address, "'");
  if (env.rank != 0) {
    std::vector<std::string> candidates;
    if (server_host == host) candidates.push_back("127.0.0.1");
    candidates.push_back(server_host);
    std::istringstream list(ips);
    for (std::string ip; std::getline(list, ip, ',');) candidates.push_back(ip);
    std::string chosen = server_host;  // none accepts: let the store's own error name it
    for (const auto& c : candidates) {
      if (accepts(c, port, std::chrono::seconds(2))) {
        chosen = c;
        break;
      }
    }
    server_host = chosen;
    store = tcp_store(server_host, port, /*server=*/false, env.world_size, timeout);
  }
  ZT_LOG_DEBUG("rendezvous store bootstrapped over MPI at ", server_host, ":", port);
  return store;
}
#endif

}  // namespace

c10::intrusive_ptr<c10d::Store> job_store(const Env& env, std::chrono::milliseconds timeout) {
  StoreCache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  std::string key;
  if (env.has_master()) {
    key = env.master_addr + ":" + std::to_string(env.master_port);
  } else if (env.world_size == 1) {
    key = "local";
  } else {
    ZT_CHECK(env.launcher == "mpi", "a ", env.world_size, "-rank job launched by ", env.launcher,
             " needs MASTER_ADDR and MASTER_PORT for its rendezvous store (neither is set)");
    key = "mpi";
  }
  auto it = c.stores.find(key);
  if (it == c.stores.end()) {
    c10::intrusive_ptr<c10d::Store> store;
    if (env.has_master()) {
      store = tcp_store(env.master_addr, env.master_port, env.rank == 0, env.world_size, timeout);
    } else if (env.world_size == 1) {
      store = c10::make_intrusive<c10d::HashStore>();
    } else {
#ifdef ZT_HAVE_MPI
      store = mpi_bootstrapped_store(env, timeout);
#else
      ZT_THROW("a ", env.world_size, "-rank job without MASTER_ADDR/MASTER_PORT needs the MPI ",
               "bootstrap, which this build lacks (no MPI at configure time)");
#endif
    }
    it = c.stores.emplace(key, store).first;
  }
  int generation = c.generation++;
  return c10::make_intrusive<c10d::PrefixStore>("zt/" + std::to_string(generation), it->second);
}

}  // namespace zt::dist
