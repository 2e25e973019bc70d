# Debian-packaged dependencies (scripts/setup.sh installs them).
#
# ZT_REQUIRE_ALL_DEPS (ON, what CI and scripts/build.sh use): every dependency below is required.
# OFF: a machine that has only LibTorch, the CUDA toolkit and NCCL (bench/gpu_check.sh on a GPU
# box without apt) still builds the libraries, the CUDA plugin, the GPU checks and the GPU
# benchmark; each missing dependency switches off what needs it, listed at configure time:
#   spdlog      -> logging writes to stderr itself (same format)
#   MPI         -> no mpi backend (parallel/mpi_*), no multi-rank tests, launcher tests, smoke
#   gloo        -> no gloo backend (parallel/gloo_communicator.*; headers of libgloo-dev)
#   yaml-cpp, Boost.Program_options -> no config files, checkpoints, CLI tools, launcher, examples'
#                  programs (the engine takes EngineOptions directly)
#   SentencePiece -> no tokenizer (data/tokenizer.*) or zt-pretokenize
#   GTest       -> no test suites (the GPU checks have their own driver, zt-gpu-checks)
# ZT_FULL_DEPS says whether everything was found; the areas' CMakeLists read the ZT_HAVE_*.
option(ZT_REQUIRE_ALL_DEPS "Fail configure when an optional dependency is missing" ON)
if(ZT_REQUIRE_ALL_DEPS)
  set(_zt_req REQUIRED)
else()
  set(_zt_req QUIET)
endif()

find_package(Threads REQUIRED)

find_package(MPI ${_zt_req} COMPONENTS C)
set(ZT_HAVE_MPI ${MPI_C_FOUND})
if(ZT_HAVE_MPI)
  # C API only: keep OpenMPI's deprecated C++ bindings out of every translation unit.
  set_property(TARGET MPI::MPI_C APPEND PROPERTY INTERFACE_COMPILE_DEFINITIONS
               OMPI_SKIP_MPICXX=1 MPICH_SKIP_MPICXX=1)
endif()

find_package(yaml-cpp ${_zt_req})
find_package(Boost ${_zt_req} COMPONENTS program_options)
if(yaml-cpp_FOUND AND Boost_FOUND)
  set(ZT_HAVE_CONFIG ON)
else()
  set(ZT_HAVE_CONFIG OFF)
endif()


find_package(spdlog ${_zt_req})
set(ZT_HAVE_SPDLOG ${spdlog_FOUND})

find_package(PkgConfig ${_zt_req})
set(ZT_HAVE_SENTENCEPIECE OFF)
if(PkgConfig_FOUND AND NOT CMAKE_DISABLE_FIND_PACKAGE_SentencePiece)
  pkg_check_modules(SENTENCEPIECE ${_zt_req} IMPORTED_TARGET sentencepiece)
  set(ZT_HAVE_SENTENCEPIECE ${SENTENCEPIECE_FOUND})
elseif(ZT_REQUIRE_ALL_DEPS)
  message(FATAL_ERROR "SentencePiece disabled but ZT_REQUIRE_ALL_DEPS is ON")
endif()

# gloo: ProcessGroupGloo.hpp (torch wheel) includes gloo's headers, which the wheel lacks; they
# come from Debian's libgloo-dev (headers only; see parallel/gloo_communicator.h).
set(ZT_HAVE_GLOO OFF)
if(NOT CMAKE_DISABLE_FIND_PACKAGE_Gloo)
  find_path(ZT_GLOO_INCLUDE gloo/rendezvous/store.h)
  if(ZT_GLOO_INCLUDE)
    set(ZT_HAVE_GLOO ON)
  endif()
endif()
if(NOT ZT_HAVE_GLOO AND ZT_REQUIRE_ALL_DEPS)
  message(FATAL_ERROR "gloo headers not found: apt-get install libgloo-dev")
endif()

set(ZT_HAVE_GTEST OFF)
if(ZT_BUILD_TESTS)
  find_package(GTest ${_zt_req})
  if(GTest_FOUND)
    set(ZT_HAVE_GTEST ON)
  endif()
endif()

set(ZT_HAVE_MPIEXEC OFF)
if(ZT_HAVE_MPI)
  find_program(ZT_MPIEXEC NAMES mpirun mpiexec ${_zt_req})
  if(ZT_MPIEXEC)
    set(ZT_HAVE_MPIEXEC ON)
  endif()
endif()
# Flags every mpirun in tests and scripts needs on these machines: more ranks than cores, and
# root (CI runs as root).
set(ZT_MPIEXEC_FLAGS --oversubscribe)
execute_process(COMMAND id -u OUTPUT_VARIABLE _zt_uid OUTPUT_STRIP_TRAILING_WHITESPACE)
if(_zt_uid STREQUAL "0")
  list(APPEND ZT_MPIEXEC_FLAGS --allow-run-as-root)
endif()

set(ZT_FULL_DEPS ON)
set(_zt_missing)
foreach(dep MPI MPIEXEC CONFIG SPDLOG SENTENCEPIECE GLOO)
  if(NOT ZT_HAVE_${dep})
    set(ZT_FULL_DEPS OFF)
    list(APPEND _zt_missing ${dep})
  endif()
endforeach()
if(ZT_BUILD_TESTS AND NOT ZT_HAVE_GTEST)
  set(ZT_FULL_DEPS OFF)
  list(APPEND _zt_missing GTest)
endif()
if(NOT ZT_FULL_DEPS)
  message(STATUS "zerotorch: reduced build, missing: ${_zt_missing}; building the libraries, "
                 "the CUDA plugin, zt-gpu-checks and zt-gpu-bench only")
endif()
