#include "launcher/node_link.h"

#include <cerrno>
#include <cstring>
#include <mutex>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sstream>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "base/error.h"
#include "base/logging.h"
#include "launcher/line_socket.h"

namespace zt::launcher {
namespace {

constexpr int kRetryMs = 200;  // between connection attempts to node 0

struct Conn {
  int fd = -1;
  int node = -1;          // from its "H <node>" line; node 0's link for the other nodes
  std::string inbuf;      // bytes of an incomplete line
  bool finished = false;  // sent "D": its closing is no news
};

}  // namespace

struct NodeLink::State {
  int node_rank = 0;
  int nnodes = 1;
  std::string master_addr;
  int port = 0;
  int listen_fd = -1;
  WakePipe stop_pipe;
  WakePipe wake_pipe;

  std::mutex mu;  // guards everything below
  std::vector<Conn> conns;
  std::vector<std::string> pending;  // lines for node 0 before the connection exists
  bool connected_once = false;
  int attempt = 0;
  std::string peer_failure;
  int peer_failure_attempt = -1;
  std::string last_failure_line;  // node 0: the latest "F" line, for nodes that connect late
  bool quit = false;
  std::thread thread;

  // Caller holds mu.
  void trigger(int failed_attempt, const std::string& what) {
    if (failed_attempt < attempt) return;  // a late report of a round already stopped
    // The first report of the latest round names the cause (an observer sees every round).
    if (!peer_failure.empty() && failed_attempt <= peer_failure_attempt) return;
    peer_failure = what;
    peer_failure_attempt = failed_attempt;
    stop_pipe.signal();
  }

  // Caller holds mu. Node 0 passes a failure on to every other node.
  void relay(const std::string& line, int from_fd) {
    if (node_rank != 0) return;
    last_failure_line = line;
    for (const Conn& c : conns) {
      if (c.fd != from_fd) send_line(c.fd, line);
    }
  }

  // Caller holds mu.
  void handle_line(Conn& c, const std::string& line) {
    std::istringstream in(line);
    std::string kind;
    in >> kind;
    if (kind == "H") {
      in >> c.node;
      c.finished = c.node < 0;  // an observer's leaving is no failure
      // A node that starts after a failure joins the stop (and the restart round) at once.
      if (!last_failure_line.empty()) send_line(c.fd, last_failure_line);
    } else if (kind == "D") {
      c.finished = true;
    } else if (kind == "F") {
      int failed_attempt = 0;
      in >> failed_attempt;
      std::string what;
      std::getline(in, what);
      if (!what.empty() && what[0] == ' ') what.erase(0, 1);
      trigger(failed_attempt, what);
      relay(line, c.fd);
    }
  }

  // Caller holds mu. Returns false when the connection closed.
  bool pump(Conn& c) {
    char buf[4096];
    const ssize_t n = ::recv(c.fd, buf, sizeof(buf), 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
    if (n <= 0) {
      if (!c.finished && !quit) {
        const std::string who = c.node >= 0 ? "node " + std::to_string(c.node) : "a node";
        const std::string what = who + "'s ztrun went away without finishing";
        trigger(attempt, what);
        relay("F " + std::to_string(attempt) + " " + what, c.fd);
      }
      return false;
    }
    c.inbuf.append(buf, static_cast<size_t>(n));
    for (size_t nl; (nl = c.inbuf.find('\n')) != std::string::npos;) {
      const std::string line = c.inbuf.substr(0, nl);
      c.inbuf.erase(0, nl + 1);
      handle_line(c, line);
    }
    return true;
  }

  void connect_to_node0() {
    const int fd = try_connect(master_addr, port, 500);
    if (fd < 0) return;
    std::lock_guard<std::mutex> lock(mu);
    Conn c;
    c.fd = fd;
    c.node = 0;
    send_line(fd, "H " + std::to_string(node_rank));
    for (const auto& line : pending) send_line(fd, line);
    pending.clear();
    conns.push_back(std::move(c));
    connected_once = true;
  }

  void loop() {
    for (;;) {
      bool need_connect;
      std::vector<pollfd> fds{{wake_pipe.read_fd(), POLLIN, 0}};
      {
        std::lock_guard<std::mutex> lock(mu);
        if (quit) return;
        need_connect = node_rank != 0 && !connected_once;
        if (listen_fd >= 0) fds.push_back({listen_fd, POLLIN, 0});
        for (const Conn& c : conns) fds.push_back({c.fd, POLLIN, 0});
      }
      if (need_connect) {
        connect_to_node0();
        std::lock_guard<std::mutex> lock(mu);
        if (!connected_once) {
          pollfd p{wake_pipe.read_fd(), POLLIN, 0};
          ::poll(&p, 1, kRetryMs);
        }
        continue;
      }
      if (::poll(fds.data(), fds.size(), 1000) <= 0) continue;
      std::lock_guard<std::mutex> lock(mu);
      if (quit) return;
      for (const pollfd& p : fds) {
        if (!p.revents || p.fd == wake_pipe.read_fd()) continue;
        if (p.fd == listen_fd) {
          const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
          if (fd >= 0) conns.push_back(Conn{fd, -1, {}, false});
          continue;
        }
        for (size_t i = 0; i < conns.size(); ++i) {
          if (conns[i].fd != p.fd) continue;
          if (!pump(conns[i])) {
            ::close(conns[i].fd);
            conns.erase(conns.begin() + static_cast<long>(i));
          }
          break;
        }
      }
      wake_pipe.drain();
    }
  }

  // Caller holds mu.
  void send_all(const std::string& line) {
    if (node_rank == 0 && line[0] == 'F') last_failure_line = line;
    if (node_rank != 0 && !connected_once) {
      pending.push_back(line);
      return;
    }
    for (const Conn& c : conns) send_line(c.fd, line);
  }
};

NodeLink::NodeLink(int node_rank, int nnodes, const std::string& master_addr, int port)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.node_rank = node_rank;
  s.nnodes = nnodes;
  s.master_addr = master_addr;
  s.port = port;
  if (node_rank == 0) {
    s.listen_fd = listen_on(port, nnodes);
    if (s.listen_fd < 0) {
      const int err = errno;
      ZT_THROW("--launcher-port ", port, " cannot be used on this host: ", std::strerror(err),
               "; pick another with --launcher-port");
    }
  }
  s.thread = std::thread([this] { state_->loop(); });
}

NodeLink::~NodeLink() {
  State& s = *state_;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.quit = true;
  }
  s.wake_pipe.signal();
  s.thread.join();
  for (Conn& c : s.conns) ::close(c.fd);
  if (s.listen_fd >= 0) ::close(s.listen_fd);
}

int NodeLink::stop_fd() const {
  return state_->stop_pipe.read_fd();
}

void NodeLink::begin_attempt(int attempt) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->attempt = attempt;
  state_->peer_failure.clear();
  state_->peer_failure_attempt = -1;
  state_->stop_pipe.drain();
}

std::string NodeLink::peer_failure() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->peer_failure;
}

void NodeLink::report_failure(const std::string& what) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->send_all("F " + std::to_string(state_->attempt) + " " + what);
}

void NodeLink::report_done() {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->send_all("D");
}

}  // namespace zt::launcher
