#pragma once
// The job's rendezvous store (c10d Store): gloo's rendezvous, the NCCL unique-id exchange and the
// desync side channel all run over it.
//
//  - MASTER_ADDR/MASTER_PORT set: a c10d TCPStore there; rank 0 hosts the server.
//  - else one rank: an in-process HashStore (no launcher needed for unit tests).
//  - else launched by mpirun: rank 0 hosts a TCPStore on a free port and MPI broadcasts its
//    host and port (MPI is up anyway in that case), so gloo and NCCL also work under plain mpirun.
//  - else: an error naming MASTER_ADDR/MASTER_PORT.
// One TCPStore per process and address (a second server on the same port would fail); each
// communicator gets its own PrefixStore namespace "zt/<n>/", n counting communicators created in
// this process, identical on every rank because ranks create communicators in the same order.

#include <chrono>
#include <string>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "parallel/env.h"

namespace zt::dist {

// A fresh namespace of the job store for one communicator.
c10::intrusive_ptr<c10d::Store> job_store(const Env& env, std::chrono::milliseconds timeout);

}  // namespace zt::dist
