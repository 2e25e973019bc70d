# Target helpers shared by every folder. Conventions:
#   <area>/**/*.cpp            -> the area's library (zt_<area>)
#   except *_main.cpp          -> executables, declared by the area's CMakeLists
#          *_cuda.cpp, *.cu    -> the CUDA plugin (zt_cuda), built only when ZT_CUDA_ENABLED
#          files under tools/  -> executables

# Warnings as errors in our own code only (LibTorch and Debian headers are SYSTEM includes).
# ZT_WERROR=OFF keeps the warnings but not the errors: for a compiler CI has not seen (the GPU
# machine's image may have a newer GCC, whose new warnings must not cost its one build).
option(ZT_WERROR "Treat compiler warnings in zerotorch's own code as errors" ON)
function(zt_warnings target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra>)
  if(ZT_WERROR)
    target_compile_options(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:CXX>:-Werror -Wno-error=deprecated-declarations>)
  endif()
endfunction()

# Unity builds of the libraries and test programs: their sources compile in batches of up to
# ZT_UNITY_BATCH files, so LibTorch's headers (even precompiled, ZtPch.cmake) are loaded and its
# templates instantiated once per batch rather than once per file, which is most of a first
# build's time on a few cores (the test programs' objects: about half the compile time batched).
# Sources with their own flags (the SIMD kernels of optim/) compile alone, as CMake never batches
# a file with per-source options. File-local names must therefore be unique within a target.
# ZT_UNITY=OFF compiles every file on its own (e.g. to find which file a diagnostic belongs to).
option(ZT_UNITY "Compile each library's and test program's sources in batches (unity build)" ON)
set(ZT_UNITY_BATCH 8 CACHE STRING "Sources per unity batch")
function(zt_unity target)
  if(ZT_UNITY)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON
                                               UNITY_BUILD_BATCH_SIZE ${ZT_UNITY_BATCH})
  endif()
endfunction()

# zt_area_sources(<out-var> <dir> [<exclude-regex>]): the library sources of one area folder.
function(zt_area_sources out dir)
  file(GLOB_RECURSE _all CONFIGURE_DEPENDS "${dir}/*.cpp")
  set(_keep)
  foreach(f IN LISTS _all)
    if(f MATCHES "_main\\.cpp$" OR f MATCHES "_cuda\\.cpp$" OR f MATCHES "/tools/")
      continue()
    endif()
    if(ARGC GREATER 2 AND f MATCHES "${ARGV2}")
      continue()
    endif()
    list(APPEND _keep "${f}")
  endforeach()
  set(${out} ${_keep} PARENT_SCOPE)
endfunction()

# zt_library(<name> DIR <dir> AREA <area> [EXCLUDE <regex>] [DEPS <targets>...]): the shared
# library of one area folder, linked to the libraries of the areas below it (ZtLayers.cmake) and
# to DEPS (LibTorch, system libraries).
function(zt_library name)
  cmake_parse_arguments(A "" "DIR;EXCLUDE;AREA" "DEPS" ${ARGN})
  if(A_EXCLUDE)
    zt_area_sources(srcs "${A_DIR}" "${A_EXCLUDE}")
  else()
    zt_area_sources(srcs "${A_DIR}")
  endif()
  add_library(${name} SHARED ${srcs})
  add_library(zt::${name} ALIAS ${name})
  target_include_directories(${name} PUBLIC $<BUILD_INTERFACE:${ZT_SOURCE_DIR}>
                                                 $<INSTALL_INTERFACE:include/zerotorch>)
  zt_layer_deps(${A_AREA} below)
  foreach(area IN LISTS below)
    target_link_libraries(${name} PUBLIC zt_${area})
  endforeach()
  target_link_libraries(${name} PUBLIC ${A_DEPS})
  set_target_properties(${name} PROPERTIES BUILD_RPATH "$ORIGIN")
  zt_warnings(${name})
  zt_unity(${name})
endfunction()

# zt_add_subdirectories([EXCLUDE <regex>]): every subfolder of the current folder that has a
# CMakeLists.txt (the examples, the benchmarks and the test folders of an area, one per concept),
# except those whose path matches EXCLUDE.
function(zt_add_subdirectories)
  cmake_parse_arguments(A "" "EXCLUDE" "" ${ARGN})
  file(GLOB dirs LIST_DIRECTORIES true CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*)
  foreach(d IN LISTS dirs)
    if(A_EXCLUDE AND d MATCHES "${A_EXCLUDE}")
      continue()
    endif()
    if(IS_DIRECTORY ${d} AND EXISTS ${d}/CMakeLists.txt)
      add_subdirectory(${d})
    endif()
  endforeach()
endfunction()

# zt_executable(<name> SOURCES ... [LIBS ...]): a program in build/bin.
function(zt_executable name)
  cmake_parse_arguments(A "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${A_SOURCES})
  target_link_libraries(${name} PRIVATE ${A_LIBS})
  target_include_directories(${name} PRIVATE ${ZT_SOURCE_DIR})
  set_target_properties(${name} PROPERTIES BUILD_RPATH "$ORIGIN/../lib")
  zt_warnings(${name})
endfunction()

# zt_unit_test(<name> AREA <area> SOURCES ... [LIBS ...]): one GoogleTest binary, one ctest test
# named <area>.<PREFIX><name> and labelled "unit-<area>" (`ctest -L` takes a regex, so -L unit
# and -L <area> both select it). Its cases run in one process: a process per case loads LibTorch
# each time, which costs more than most cases themselves (bench/ci/README.md); a failing case is
# named in the output. --gtest_filter picks cases when the binary runs by hand. PREFIX puts a word before the name (PREFIX flight. ->
# parallel.flight.zt_flight_unit_test), so `ctest -R flight` selects it.
function(zt_unit_test name)
  cmake_parse_arguments(A "" "AREA;TIMEOUT;PREFIX" "SOURCES;LIBS" ${ARGN})
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT 300)
  endif()
  zt_executable(${name} SOURCES ${A_SOURCES} LIBS ${A_LIBS} GTest::gtest GTest::gtest_main)
  zt_unity(${name})
  target_compile_definitions(${name} PRIVATE ZT_SOURCE_DIR="${ZT_SOURCE_DIR}"
                                             ZT_BINARY_DIR="${ZT_BINARY_DIR}")
  add_test(NAME ${A_AREA}.${A_PREFIX}${name} COMMAND $<TARGET_FILE:${name}>)
  set_tests_properties(${A_AREA}.${A_PREFIX}${name} PROPERTIES LABELS "unit-${A_AREA}"
                                                                TIMEOUT ${A_TIMEOUT})
endfunction()

# zt_mpi_test(<name> AREA <area> NP <n>... SOURCES ... [LIBS ...]): a GoogleTest binary run under
# `mpirun -np <n>` for each n given: real processes, labelled "multirank;<area>". The binary gets
# its own main (it must initialise MPI or its communicator itself), or with MPI_WORLD_MAIN the
# shared one of tests/support/mpi_world.h.
function(zt_mpi_test name)
  cmake_parse_arguments(A "MPI_WORLD_MAIN" "AREA;TIMEOUT;SUFFIX" "NP;SOURCES;LIBS;ARGS;LABELS;ENV"
                        ${ARGN})
  if(A_MPI_WORLD_MAIN)
    list(APPEND A_SOURCES ${ZT_SOURCE_DIR}/tests/support/mpi_world_main.cpp)
  endif()
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT 300)
  endif()
  if(NOT TARGET ${name})
    zt_executable(${name} SOURCES ${A_SOURCES} LIBS ${A_LIBS} GTest::gtest)
    zt_unity(${name})
    target_compile_definitions(${name} PRIVATE ZT_SOURCE_DIR="${ZT_SOURCE_DIR}"
                                               ZT_BINARY_DIR="${ZT_BINARY_DIR}")
  endif()
  foreach(np IN LISTS A_NP)
    set(test ${A_AREA}.${name}${A_SUFFIX}.np${np})
    add_test(NAME ${test}
             COMMAND ${ZT_MPIEXEC} ${ZT_MPIEXEC_FLAGS} -np ${np} $<TARGET_FILE:${name}> ${A_ARGS})
    # RUN_SERIAL: multi-process tests pick free ports and oversubscribe the cores; run alone so
    # no other test takes a port between "free" and "bound", or starves a timing check.
    set_tests_properties(${test} PROPERTIES
      LABELS "multirank;${A_AREA};${A_LABELS}" TIMEOUT ${A_TIMEOUT} PROCESSORS ${np} RUN_SERIAL TRUE)
    if(A_ENV)
      # Local ranks inherit mpirun's environment.
      set_tests_properties(${test} PROPERTIES ENVIRONMENT "${A_ENV}")
    endif()
  endforeach()
endfunction()

# zt_command_test(<test-name> AREA <area> KIND unit|multirank [SHARES_CORES] COMMAND ...): any
# other test, e.g. a script that launches ranks through ztrun. Fails on a non-zero exit.
# SHARES_CORES marks a multirank test that keeps about one core busy on average (measured: at most
# ~1.7 CPU seconds per second, most of them far less: mostly one process at a time, or waiting),
# checks no tight time bound and starts its ranks only through `ztrun --standalone` or fixed ports
# outside [20000, 29000): it runs beside other such tests and unit tests instead of alone.
# --standalone ports are drawn below the kernel's ephemeral range and locked per launcher
# (launcher/port.h), so jobs side by side never meet on one port.
function(zt_command_test name)
  cmake_parse_arguments(A "SHARES_CORES" "AREA;KIND;TIMEOUT" "COMMAND" ${ARGN})
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT 300)
  endif()
  add_test(NAME ${A_AREA}.${name} COMMAND ${A_COMMAND})
  set_tests_properties(${A_AREA}.${name} PROPERTIES LABELS "${A_KIND};${A_AREA}" TIMEOUT ${A_TIMEOUT})
  if(A_KIND STREQUAL "multirank" AND NOT A_SHARES_CORES)
    set_tests_properties(${A_AREA}.${name} PROPERTIES RUN_SERIAL TRUE)  # see zt_mpi_test
  endif()
endfunction()

# zt_bench(<name> SOURCES ... [LIBS ...]): a benchmark program in build/bin.
function(zt_bench name)
  cmake_parse_arguments(A "" "" "SOURCES;LIBS" ${ARGN})
  zt_executable(${name} SOURCES ${A_SOURCES} LIBS ${A_LIBS})
endfunction()
