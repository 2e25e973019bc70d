#pragma once
// zt::launcher::NodeLink: joins the ztruns of a multi-node launch, so that a failure on any node
// stops the ranks of every node within seconds (torchrun's agents do this through their
// rendezvous), not only when the other ranks' collectives time out.
//
// Node 0's ztrun listens on the launcher port (--launcher-port, default master port + 1); every
// other node's ztrun connects to MASTER_ADDR:port (retrying until node 0 is up). Messages are
// text lines:
//   "F <attempt> <what failed>"  a node's group failed in that attempt; node 0 relays it to all
//   "D"                          the node's group finished; its connection may close now
// A connection that closes without "D" (a ztrun killed outright) counts as a failure of that
// node. Node 0 replays the latest failure to a node that connects after it. A failure of an older
// attempt than the current one is ignored, so each restart round is stopped once.
//
// An observer (node_rank -1: the ztrun that started the nodes from a hostfile) connects like a
// node, never reports, and learns the failures, so that its own last line can name the rank.
//
// Thread-safety: a background thread owns the sockets; the public methods may be called from the
// supervising thread.

#include <memory>
#include <string>

namespace zt::launcher {

class NodeLink {
 public:
  // Node 0 binds the port here (throws zt::Error when it is in use); other nodes and observers
  // (node_rank -1) connect in the background.
  NodeLink(int node_rank, int nnodes, const std::string& master_addr, int port);
  ~NodeLink();
  NodeLink(const NodeLink&) = delete;
  NodeLink& operator=(const NodeLink&) = delete;

  // Readable once another node reported a failure of the current attempt (poll it).
  int stop_fd() const;
  // Starts a new attempt: forgets stops of older attempts.
  void begin_attempt(int attempt);
  // What the other node reported ("rank 3 (local rank 1) exited with code 6 on node 1").
  std::string peer_failure() const;
  // Tells every other node that this node's group failed.
  void report_failure(const std::string& what);
  // Tells the other nodes that this node finished cleanly.
  void report_done();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace zt::launcher
