#pragma once
// The process's MPI runtime as zerotorch uses it: initialisation, the custom reduction ops for
// fp16/bf16, and one progress thread that owns every MPI call zerotorch makes after MPI_Init.
//
// Why a progress thread: OpenMPI 4.1 has no asynchronous progress ("OMPI progress: no" in
// ompi_info), so a non-blocking collective (MPI_Iallreduce, ...) only advances while some thread
// is inside an MPI call. The engine starts collectives from autograd hooks and computes while
// they run; without a thread calling MPI, a bucket's all-reduce would not move until wait(). The
// progress thread issues each queued collective (in submission order, so every rank issues the
// same sequence) and then polls all in-flight requests with MPI_Testsome, yielding the CPU
// between polls; with nothing in flight it sleeps on a condition variable and costs nothing.
// Callers never touch MPI themselves, so MPI_THREAD_SERIALIZED suffices; MPI_THREAD_MULTIPLE
// is requested so that the program may also call MPI directly (the commbench baseline does).
//
// Lifetime: initialised on first use (unless the program already called MPI_Init_thread, with
// at least MPI_THREAD_SERIALIZED); finalised at process exit if zerotorch initialised it. If
// collectives are still in flight at exit (a peer never arrived), MPI_Finalize is skipped rather
// than hanging the exit.

#include <functional>
#include <memory>
#include <string>

#include <c10/core/ScalarType.h>
#include <mpi.h>

#include "parallel/communicator.h"

namespace zt::dist::mpi {

// One in-flight operation: `start` runs on the progress thread and issues the non-blocking MPI
// call (returning its request, or MPI_REQUEST_NULL when already done); `finish` runs on the
// progress thread after completion (e.g. dividing for avg); `done` gets "" or an error message.
struct Operation {
  std::function<MPI_Request()> start;
  std::function<void()> finish;
  std::function<void(const std::string& error)> done;
};

// Initialises MPI (once) and starts the progress thread.
void ensure_initialized();
// Queues an operation; returns at once.
void submit(Operation op);
// Runs fn on the progress thread and waits for it (for blocking MPI calls like MPI_Comm_dup).
void run_sync(const std::function<void()>& fn);

// MPI datatype of a tensor dtype (fp16/bf16 are 2-byte derived types); throws for others.
MPI_Datatype datatype(c10::ScalarType type);
// MPI op for (op, dtype); kAvg maps to sum (callers divide). Throws for unsupported pairs.
MPI_Op reduce_op(ReduceOp op, c10::ScalarType type);

// MPI_Error_string of a code.
std::string error_string(int code);

// Broadcasts a string over MPI_COMM_WORLD from root (the rendezvous store's bootstrap).
std::string broadcast_string_world(const std::string& value, int root);

}  // namespace zt::dist::mpi
