#pragma once
// The membership rendezvous of an elastic job (ztrun --nnodes MIN:MAX), torchrun's dynamic
// rendezvous in the ztruns themselves: one ztrun hosts it (RendezvousHost, the one whose machine
// owns the endpoint address), every ztrun (the host's own included) takes part through a
// RendezvousAgent.
//
// Rounds. The host forms a round from the nodes that have joined: the first once MIN have
// joined and either MAX have or last_call_timeout passed; later ones at once from every node
// still there (up to MAX). The host's own node is node 0 (rank 0's TCPStore lives at the
// endpoint address); the others follow in the order they joined. A round ends
//  - in success: every node's ranks exited 0 ("D"); the host tells all ("F") and the job ends;
//  - in a failure: a node's rank failed ("X"), or a node was lost (its ztrun's connection closed,
//    or it missed keep_alive_max_attempt heartbeats): the host stops the round ("S") and, while
//    --max-restarts allows, forms the next one from the nodes still there;
//  - by a join: a node joined while the round had fewer than MAX nodes: the round is stopped and
//    the next one includes it (not counted against --max-restarts). A node beyond MAX waits.
// Every restart resumes from the program's last complete checkpoint; the world size of the new
// round is whatever the nodes there sum to. Fewer than MIN nodes for join_timeout, or failures
// past --max-restarts, end the job ("E") on every node.
//
// Lines (ztrun -> host): "J <job> <id> <nproc>", "X <round> <what>", "D <round>", "K";
// (host -> ztrun): "R <round> <node_rank> <nproc of each node, comma-separated>",
// "S <round> <why>", "F", "E <why>", "K".
//
// The host is a single point of failure (as torchrun's c10d rendezvous backend is): when its
// ztrun dies, every other node ends its ranks and exits 1.

#include <memory>
#include <string>
#include <vector>

#include "launcher/options.h"

namespace zt::launcher {

class RendezvousHost {
 public:
  // Listens at `addr`:`port` when `addr` belongs to this machine and the port is free; nullptr
  // when the address is another machine's or the port is taken (another ztrun hosts it: this one
  // is then an ordinary node). Throws zt::Error when the port cannot be bound otherwise.
  // `own_id` is the id of this ztrun's agent, which becomes node 0 of every round.
  static std::unique_ptr<RendezvousHost> start(const LaunchOptions& options,
                                               const std::string& addr, int port,
                                               const std::string& own_id);
  ~RendezvousHost();
  RendezvousHost(const RendezvousHost&) = delete;
  RendezvousHost& operator=(const RendezvousHost&) = delete;

  struct State;

 private:
  explicit RendezvousHost(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// What the host decided for this node.
struct RoundAssignment {
  enum class Kind { kRound, kFinished, kEnded, kInterrupted } kind = Kind::kEnded;
  int round = -1;
  int node_rank = -1;
  std::vector<int> node_slots;  // processes of every node of the round
  std::string why;              // kEnded: the host's reason, or the lost connection
};

class RendezvousAgent {
 public:
  // Connects to the host in the background (retrying until join_timeout) and joins.
  RendezvousAgent(const LaunchOptions& options, const std::string& addr, int port,
                  const std::string& id);
  ~RendezvousAgent();
  RendezvousAgent(const RendezvousAgent&) = delete;
  RendezvousAgent& operator=(const RendezvousAgent&) = delete;

  // Waits for the next round (kRound), the end of the job (kFinished, kEnded), or for
  // `interrupted()` to return true (kInterrupted; polled every 100 ms). Rounds the host already
  // stopped again are skipped.
  template <typename F>
  RoundAssignment next(F interrupted) {
    for (;;) {
      RoundAssignment a;
      if (poll_next(&a, 100)) return a;
      if (interrupted()) {
        a.kind = RoundAssignment::Kind::kInterrupted;
        return a;
      }
    }
  }

  // Readable while the current round (the last next() returned) is stopped by the host, or the
  // host is lost; for SupervisorOptions::external_stop_fd.
  int stop_fd() const;
  // Why the round was stopped ("node 1 (host:pid) was lost", "rank 3 ... exited with code 1").
  std::string stop_reason() const;
  void report_failure(int round, const std::string& what);
  void report_done(int round);

 private:
  bool poll_next(RoundAssignment* out, int timeout_ms);
  struct State;
  std::unique_ptr<State> state_;
};

// "host:pid": this ztrun's id in the rendezvous.
std::string agent_id();

}  // namespace zt::launcher
