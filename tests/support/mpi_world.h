#pragma once
// The communicator of a multi-rank GoogleTest binary built with zt_mpi_test(... MPI_WORLD_MAIN):
// its main (tests/support/mpi_world_main.cpp) creates an MPI communicator over every rank before
// the tests run, fails every rank when any rank fails a test, and destroys it at the end.

#include <memory>

#include "parallel/communicator.h"

namespace zt::testing {

std::shared_ptr<dist::Communicator>& mpi_world();

}  // namespace zt::testing
