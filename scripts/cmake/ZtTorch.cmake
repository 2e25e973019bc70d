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
