#include "launcher/elastic_rendezvous.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <poll.h>
#include <set>
#include <sstream>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

#include "base/error.h"
#include "base/logging.h"
#include "launcher/line_socket.h"

namespace zt::launcher {
namespace {

double now_s() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

// The rest of a line after the words already read from `in`.
std::string tail_words(std::istringstream& in) {
  std::string rest;
  std::getline(in, rest);
  if (!rest.empty() && rest[0] == ' ') rest.erase(0, 1);
  return rest;
}

// One ztrun connected to the host.
struct Peer {
  int fd = -1;
  std::string inbuf;
  std::string id;  // empty until it joined
  int nproc = 0;
  long order = 0;  // join order
  double last_heard = 0;
  bool drop = false;  // to be closed after this poll
};

}  // namespace

// ---- host ------------------------------------------------------------------------------------

struct RendezvousHost::State {
  LaunchOptions o;
  std::string own_id;
  int listen_fd = -1;
  WakePipe wake_pipe;
  std::atomic<bool> quit{false};
  std::thread thread;
  // For the destructor, which must not touch what the thread owns.
  std::atomic<bool> over{false};    // finished, published
  std::atomic<int> other_peers{0};  // joined nodes besides the host's own

  std::vector<Peer> peers;
  long next_order = 0;
  int round = -1;
  bool running = false;
  bool finished = false;  // F or E sent: the job is over
  std::vector<std::string> members;
  std::set<std::string> done;  // members whose ranks of the current round exited 0
  int failures = 0;
  bool formed_once = false;
  double enough_since = -1;  // first round: when MIN nodes were in
  double short_since = 0;    // when the nodes last fell short of a round
  double last_beat = 0;

  double heartbeat_timeout() const {
    return o.rdzv_conf.keep_alive_interval_s * o.rdzv_conf.keep_alive_max_attempt;
  }

  int member_index(const std::string& id) const {
    const auto it = std::find(members.begin(), members.end(), id);
    return it == members.end() ? -1 : static_cast<int>(it - members.begin());
  }

  void send_joined(const std::string& line) {
    for (Peer& p : peers) {
      if (!p.id.empty()) send_line(p.fd, line);
    }
  }

  void end_job(const std::string& why) {
    ZT_LOG_ERROR("rendezvous: ", why);
    send_joined("E " + why);
    finished = true;
    running = false;
  }

  void stop_round(const std::string& why, bool failure) {
    if (!running) return;
    running = false;
    short_since = now_s();
    ZT_LOG_WARN("rendezvous: round ", round, " stopped: ", why);
    send_joined("S " + std::to_string(round) + " " + why);
    if (!failure) return;
    ++failures;
    if (failures > o.max_restarts) {
      end_job(why + "; no restarts left (--max-restarts " + std::to_string(o.max_restarts) + ")");
    }
  }

  void form_round(std::vector<Peer*> nodes) {
    ++round;
    running = true;
    formed_once = true;
    enough_since = -1;
    members.clear();
    done.clear();
    std::string slots;
    int world = 0;
    for (Peer* p : nodes) {
      members.push_back(p->id);
      slots += (slots.empty() ? "" : ",") + std::to_string(p->nproc);
      world += p->nproc;
    }
    ZT_LOG_INFO("rendezvous: round ", round, " with ", nodes.size(), " nodes, world size ", world,
                " (", slots, " ranks per node)");
    for (size_t i = 0; i < nodes.size(); ++i) {
      send_line(nodes[i]->fd, "R " + std::to_string(round) + " " + std::to_string(i) + " " + slots);
    }
  }

  void lost(Peer& p, const std::string& how) {
    p.drop = true;
    if (p.id.empty() || finished) return;
    const int index = member_index(p.id);
    if (running && index >= 0 && !done.count(p.id)) {
      stop_round("node " + std::to_string(index) + " (" + p.id + ") " + how, true);
    } else {
      ZT_LOG_INFO("rendezvous: ", p.id, " left (", how, ")");
    }
  }

  void handle(Peer& p, const std::string& line) {
    std::istringstream in(line);
    std::string kind;
    in >> kind;
    if (kind == "J") {
      std::string job, id;
      int nproc = 0;
      in >> job >> id >> nproc;
      if (job != o.rdzv_id) {
        send_line(p.fd, "E this node belongs to job '" + job +
                            "', the rendezvous at this address "
                            "runs job '" +
                            o.rdzv_id + "' (--rdzv-id)");
        p.drop = true;
        return;
      }
      p.id = id;
      p.nproc = nproc;
      p.order = next_order++;
      ZT_LOG_INFO("rendezvous: ", id, " joined with ", nproc, " ranks");
      if (finished) {
        send_line(p.fd, "E the job has already ended");
      } else if (running && static_cast<int>(members.size()) < o.nnodes) {
        stop_round("node " + id + " joined", /*failure=*/false);
      }
    } else if (kind == "X") {
      int r = -1;
      in >> r;
      if (running && r == round && member_index(p.id) >= 0) stop_round(tail_words(in), true);
    } else if (kind == "D") {
      int r = -1;
      in >> r;
      if (!running || r != round || member_index(p.id) < 0) return;
      done.insert(p.id);
      // A member that finished and then went away still finished.
      if (done.size() < members.size()) return;
      ZT_LOG_INFO("rendezvous: round ", round, " finished on every node");
      send_joined("F");
      finished = true;
      running = false;
    }
  }

  void tick() {
    const double t = now_s();
    if (t - last_beat >= o.rdzv_conf.keep_alive_interval_s) {
      last_beat = t;
      send_joined("K");
    }
    for (Peer& p : peers) {
      if (!p.drop && t - p.last_heard > heartbeat_timeout()) {
        lost(p, "missed " + std::to_string(o.rdzv_conf.keep_alive_max_attempt) + " heartbeats");
      }
    }
    if (running || finished) return;
    std::vector<Peer*> joined;
    for (Peer& p : peers) {
      if (!p.id.empty() && !p.drop) joined.push_back(&p);
    }
    // The host's own node first (rank 0 lives at the endpoint), then in join order.
    std::sort(joined.begin(), joined.end(), [&](const Peer* a, const Peer* b) {
      if ((a->id == own_id) != (b->id == own_id)) return a->id == own_id;
      return a->order < b->order;
    });
    const bool own_in = !joined.empty() && joined.front()->id == own_id;
    if (static_cast<int>(joined.size()) > o.nnodes) joined.resize(static_cast<size_t>(o.nnodes));
    if (own_in && static_cast<int>(joined.size()) >= o.min_nodes) {
      if (!formed_once && static_cast<int>(joined.size()) < o.nnodes) {
        if (enough_since < 0) enough_since = t;
        if (t - enough_since < o.rdzv_conf.last_call_timeout_s) return;
      }
      form_round(joined);
      return;
    }
    enough_since = -1;
    if (t - short_since > o.rdzv_conf.join_timeout_s) {
      end_job("only " + std::to_string(joined.size()) + " of at least " +
              std::to_string(o.min_nodes) + " nodes joined within join_timeout (" +
              std::to_string(static_cast<int>(o.rdzv_conf.join_timeout_s)) + " s)");
    }
  }

  void loop() {
    short_since = now_s();
    while (!quit) {
      std::vector<pollfd> fds{{wake_pipe.read_fd(), POLLIN, 0}, {listen_fd, POLLIN, 0}};
      for (const Peer& p : peers) fds.push_back({p.fd, POLLIN, 0});
      ::poll(fds.data(), fds.size(), 100);
      wake_pipe.drain();
      if (fds[1].revents) {
        for (int fd;
             (fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0;) {
          Peer p;
          p.fd = fd;
          p.last_heard = now_s();
          peers.push_back(std::move(p));
        }
      }
      for (size_t i = 2; i < fds.size(); ++i) {
        if (!fds[i].revents) continue;
        Peer* p = nullptr;
        for (Peer& q : peers) {
          if (q.fd == fds[i].fd) p = &q;
        }
        if (!p || p->drop) continue;
        std::vector<std::string> lines;
        const bool open = read_lines(p->fd, &p->inbuf, &lines);
        if (!lines.empty()) p->last_heard = now_s();
        for (const std::string& line : lines) handle(*p, line);
        if (!open) lost(*p, "lost its ztrun (connection closed)");
      }
      tick();
      int others = 0;
      for (auto it = peers.begin(); it != peers.end();) {
        if (it->drop) {
          ::close(it->fd);
          it = peers.erase(it);
        } else {
          others += !it->id.empty() && it->id != own_id;
          ++it;
        }
      }
      other_peers = others;
      over = finished;
    }
  }
};

std::unique_ptr<RendezvousHost> RendezvousHost::start(const LaunchOptions& o,
                                                      const std::string& addr, int port,
                                                      const std::string& own_id) {
  const int fd = listen_at(addr, port, 64);
  if (fd < 0) {
    const int err = errno;
    // Another machine's address, or another ztrun of this machine hosts it already: an ordinary
    // node (a rendezvous of another job there refuses this node by its --rdzv-id).
    if (err == EADDRNOTAVAIL || err == EADDRINUSE) return nullptr;
    ZT_THROW("--rdzv-endpoint ", addr, ":", port,
             " cannot be bound on this host: ", std::strerror(err));
  }
  auto state = std::make_unique<State>();
  state->o = o;
  state->own_id = own_id;
  state->listen_fd = fd;
  State* s = state.get();
  state->thread = std::thread([s] { s->loop(); });
  return std::unique_ptr<RendezvousHost>(new RendezvousHost(std::move(state)));
}

RendezvousHost::RendezvousHost(std::unique_ptr<State> state) : state_(std::move(state)) {}

RendezvousHost::~RendezvousHost() {
  State& s = *state_;
  // Let the other nodes read the job's last word before the connections close: wait (briefly)
  // for them to hang up first.
  for (int k = 0; k < 50 && s.over && s.other_peers > 0; ++k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  s.quit = true;
  s.wake_pipe.signal();
  s.thread.join();
  for (Peer& p : s.peers) ::close(p.fd);
  if (s.listen_fd >= 0) ::close(s.listen_fd);
}

// ---- agent -----------------------------------------------------------------------------------

struct RendezvousAgent::State {
  LaunchOptions o;
  std::string addr;
  int port = 0;
  std::string id;
  int fd = -1;
  std::string inbuf;
  WakePipe wake_pipe;
  WakePipe stop_pipe;
  std::thread thread;

  std::mutex mu;  // guards what follows
  std::condition_variable cv;
  bool quit = false;
  std::deque<std::string> inbox;    // R, F and E lines, in order
  std::vector<std::string> outbox;  // lines to send once connected
  int current_round = -1;
  int stopped_round = -1;  // the newest round the host stopped
  std::string stop_reason;
  bool host_lost = false;
  std::string lost_why;

  double heartbeat_timeout() const {
    return o.rdzv_conf.keep_alive_interval_s * o.rdzv_conf.keep_alive_max_attempt;
  }

  // Caller holds mu.
  void lose(const std::string& why) {
    if (host_lost) return;
    host_lost = true;
    lost_why = why;
    stop_pipe.signal();
    cv.notify_all();
  }

  // Caller holds mu.
  void handle(const std::string& line) {
    std::istringstream in(line);
    std::string kind;
    in >> kind;
    if (kind == "S") {
      int r = -1;
      in >> r;
      if (r > stopped_round) {
        stopped_round = r;
        stop_reason = tail_words(in);
        if (r == current_round) stop_pipe.signal();
      }
    } else if (kind == "R" || kind == "F" || kind == "E") {
      inbox.push_back(line);
      cv.notify_all();
    }
  }

  void loop() {
    const double started = now_s();
    double last_heard = started, last_sent = started;
    while (true) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (quit) return;
      }
      if (fd < 0) {
        const int connected = try_connect(addr, port, 500);
        std::lock_guard<std::mutex> lock(mu);
        fd = connected;
        if (fd < 0) {
          if (now_s() - started > o.rdzv_conf.join_timeout_s) {
            lose("cannot reach the rendezvous at " + addr + ":" + std::to_string(port) +
                 " within join_timeout");
            return;
          }
          pollfd p{wake_pipe.read_fd(), POLLIN, 0};
          ::poll(&p, 1, 200);
          continue;
        }
        send_line(fd, "J " + o.rdzv_id + " " + id + " " + std::to_string(o.nproc_per_node));
        for (const std::string& line : outbox) send_line(fd, line);
        outbox.clear();
        last_heard = last_sent = now_s();
      }
      pollfd fds[2] = {{wake_pipe.read_fd(), POLLIN, 0}, {fd, POLLIN, 0}};
      ::poll(fds, 2, 100);
      wake_pipe.drain();
      std::vector<std::string> lines;
      const bool open = fds[1].revents ? read_lines(fd, &inbuf, &lines) : true;
      const double t = now_s();
      std::lock_guard<std::mutex> lock(mu);
      if (!lines.empty()) last_heard = t;
      for (const std::string& line : lines) handle(line);
      if (!open) {
        lose("the rendezvous host " + addr + ":" + std::to_string(port) +
             " closed the connection (its ztrun ended)");
        return;
      }
      if (t - last_heard > heartbeat_timeout()) {
        lose("the rendezvous host " + addr + ":" + std::to_string(port) + " missed " +
             std::to_string(o.rdzv_conf.keep_alive_max_attempt) + " heartbeats");
        return;
      }
      if (t - last_sent >= o.rdzv_conf.keep_alive_interval_s) {
        send_line(fd, "K");
        last_sent = t;
      }
    }
  }

  void send(const std::string& line) {
    std::lock_guard<std::mutex> lock(mu);
    if (fd >= 0 && !host_lost) {
      send_line(fd, line);
    } else {
      outbox.push_back(line);
    }
  }
};

RendezvousAgent::RendezvousAgent(const LaunchOptions& o, const std::string& addr, int port,
                                 const std::string& id)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.o = o;
  s.addr = addr;
  s.port = port;
  s.id = id;
  s.thread = std::thread([this] { state_->loop(); });
}

RendezvousAgent::~RendezvousAgent() {
  State& s = *state_;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.quit = true;
  }
  s.wake_pipe.signal();
  s.thread.join();
  if (s.fd >= 0) ::close(s.fd);
}

bool RendezvousAgent::poll_next(RoundAssignment* out, int timeout_ms) {
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mu);
  s.cv.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                [&] { return !s.inbox.empty() || s.host_lost; });
  while (!s.inbox.empty()) {
    const std::string line = s.inbox.front();
    s.inbox.pop_front();
    std::istringstream in(line);
    std::string kind;
    in >> kind;
    if (kind == "F") {
      out->kind = RoundAssignment::Kind::kFinished;
      return true;
    }
    if (kind == "E") {
      out->kind = RoundAssignment::Kind::kEnded;
      out->why = tail_words(in);
      return true;
    }
    int round = -1, node_rank = -1;
    std::string slots;
    in >> round >> node_rank >> slots;
    if (round <= s.stopped_round) continue;  // stopped before this node got to it
    out->kind = RoundAssignment::Kind::kRound;
    out->round = round;
    out->node_rank = node_rank;
    out->node_slots.clear();
    std::istringstream list(slots);
    for (std::string n; std::getline(list, n, ',');) out->node_slots.push_back(std::stoi(n));
    ZT_INTERNAL_ASSERT(node_rank >= 0 && node_rank < static_cast<int>(out->node_slots.size()),
                       "bad round line '", line, "'");
    s.current_round = round;
    s.stop_pipe.drain();
    return true;
  }
  if (s.host_lost) {
    out->kind = RoundAssignment::Kind::kEnded;
    out->why = s.lost_why;
    return true;
  }
  return false;
}

int RendezvousAgent::stop_fd() const {
  return state_->stop_pipe.read_fd();
}

std::string RendezvousAgent::stop_reason() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->host_lost ? state_->lost_why : state_->stop_reason;
}

void RendezvousAgent::report_failure(int round, const std::string& what) {
  state_->send("X " + std::to_string(round) + " " + what);
}

void RendezvousAgent::report_done(int round) {
  state_->send("D " + std::to_string(round));
}

std::string agent_id() {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  return std::string(host) + ":" + std::to_string(::getpid());
}

}  // namespace zt::launcher
