#pragma once
// An elastic node (ztrun --nnodes MIN:MAX): joins the job's rendezvous (elastic_rendezvous.h;
// this ztrun hosts it when the endpoint address is one of this machine's), runs this node's ranks
// for each round at the node rank and world size the round gives, and starts them again when the
// rendezvous forms a new round after a node left, failed or joined. Every round's ranks get
// ZT_RESTART_COUNT = the round number, so programs built on zt::initialize resume from their
// last complete checkpoint, resharded to the new world size.

#include "launcher/options.h"

namespace zt::launcher {

// Returns ztrun's exit code: 0 when a round finished on every node, 1 when the job ended without
// (failures past --max-restarts, too few nodes for join_timeout, the rendezvous host lost),
// 128+signal when ztrun was told to stop.
int launch_elastic(const LaunchOptions& options);

}  // namespace zt::launcher
