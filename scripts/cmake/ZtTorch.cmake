# Finds LibTorch (ZtFindTorch.cmake, which the installed zerotorch package uses too) and sets
# ZT_CUDA_ENABLED and the interface target zt::torch_cpu, which carries only the CPU libraries
# (torch_cpu, c10): a CPU-only run never loads libtorch_cuda or NCCL.
include(ZtFindTorch)

# CPU-only view of LibTorch for every zerotorch library.
add_library(zt_torch_cpu INTERFACE)
add_library(zt::torch_cpu ALIAS zt_torch_cpu)
if(TARGET torch_cpu_library)
  target_link_libraries(zt_torch_cpu INTERFACE torch_cpu_library c10)
else()
  target_link_libraries(zt_torch_cpu INTERFACE ${TORCH_LIBRARIES})
endif()
# Build-tree only: the installed package adds the flags and folders of the LibTorch it finds
# (zerotorchConfig.cmake), so no path of this machine's LibTorch is baked into it.
target_compile_options(zt_torch_cpu INTERFACE "$<BUILD_INTERFACE:${TORCH_CXX_FLAGS}>")
# The C++ frontend headers (torch/torch.h) sit in a folder torch_cpu does not export.
target_include_directories(zt_torch_cpu SYSTEM INTERFACE "$<BUILD_INTERFACE:${TORCH_INCLUDE_DIRS}>")

set(ZT_CUDA_ENABLED OFF)
if(ZT_WITH_CUDA STREQUAL "ON" OR ZT_WITH_CUDA STREQUAL "AUTO")
  if(CMAKE_CUDA_COMPILER AND TARGET torch_cuda)
    set(ZT_CUDA_ENABLED ON)
  elseif(ZT_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "ZT_WITH_CUDA=ON but nvcc (${CMAKE_CUDA_COMPILER}) or a CUDA LibTorch "
                        "(torch_cuda target) is missing")
  endif()
endif()

# at::parallel_for is a header template: compiled without OpenMP (_OPENMP undefined) it runs the
# whole range on the calling thread, whatever at::set_num_threads says. The library that calls it
# (optim/: CpuAdam, Adam8bit, block-wise quantization, the gradient norm's sum of squares)
# compiles with OpenMP through this target, so its loops run on LibTorch's intra-op threads. The OpenMP runtime is
# the one LibTorch loads (libgomp.so.1, bundled with the PyPI wheel): one runtime per process, one
# thread pool, and at::set_num_threads (omp_set_num_threads) governs both.
find_package(OpenMP REQUIRED COMPONENTS CXX)
add_library(zt_torch_parallel INTERFACE)
add_library(zt::torch_parallel ALIAS zt_torch_parallel)
target_compile_options(zt_torch_parallel INTERFACE ${OpenMP_CXX_FLAGS})
set(_zt_torch_gomp "${TORCH_INSTALL_PREFIX}/lib/libgomp.so.1")
if(EXISTS "${_zt_torch_gomp}")
  target_link_libraries(zt_torch_parallel INTERFACE "${_zt_torch_gomp}")
else()
  target_link_libraries(zt_torch_parallel INTERFACE OpenMP::OpenMP_CXX)
endif()
