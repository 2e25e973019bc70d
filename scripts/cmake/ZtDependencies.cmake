# Debian-packaged dependencies (scripts/setup.sh installs them).
find_package(MPI REQUIRED COMPONENTS C)
# C API only: keep OpenMPI's deprecated C++ bindings out of every translation unit.
set_property(TARGET MPI::MPI_C APPEND PROPERTY INTERFACE_COMPILE_DEFINITIONS
             OMPI_SKIP_MPICXX=1 MPICH_SKIP_MPICXX=1)
find_package(yaml-cpp REQUIRED)
find_package(Boost REQUIRED COMPONENTS program_options)
find_package(spdlog REQUIRED)
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(SENTENCEPIECE REQUIRED IMPORTED_TARGET sentencepiece)
if(ZT_BUILD_TESTS)
  find_package(GTest REQUIRED)
  include(GoogleTest)
endif()
find_program(ZT_MPIEXEC NAMES mpirun mpiexec REQUIRED)
# Flags every mpirun in tests and scripts needs on these machines: more ranks than cores, and
# root (CI runs as root).
set(ZT_MPIEXEC_FLAGS --oversubscribe)
execute_process(COMMAND id -u OUTPUT_VARIABLE _zt_uid OUTPUT_STRIP_TRAILING_WHITESPACE)
if(_zt_uid STREQUAL "0")
  list(APPEND ZT_MPIEXEC_FLAGS --allow-run-as-root)
endif()
