#include "parallel/job_store.h"

#include <map>
#include <mutex>
#include <unistd.h>

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "core/base/error.h"
#include "core/base/logging.h"
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

std::string first_line(const std::string& s) {
  return s.substr(0, s.find('\n'));
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
// Rank 0 opens a server on a free port; MPI broadcasts "<host> <port>".
c10::intrusive_ptr<c10d::Store> mpi_bootstrapped_store(const Env& env,
                                                       std::chrono::milliseconds timeout) {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  c10::intrusive_ptr<c10d::Store> store;
  std::string address;
  if (env.rank == 0) {
    store = tcp_store("127.0.0.1", 0, /*server=*/true, env.world_size, timeout);
    int port = static_cast<c10d::TCPStore*>(store.get())->getPort();
    address = std::string(host) + " " + std::to_string(port);
  }
  address = mpi::broadcast_string_world(address, 0);
  auto space = address.find(' ');
  ZT_INTERNAL_ASSERT(space != std::string::npos, "bad store address '", address, "'");
  std::string server_host = address.substr(0, space);
  int port = std::stoi(address.substr(space + 1));
  if (env.rank != 0) {
    // Same machine as rank 0: loopback always resolves, a container's hostname may not.
    if (server_host == host) server_host = "127.0.0.1";
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
