# libzt_cuda.so: every *.cu and *_cuda.cpp of the areas, for Hopper (sm_90 SASS + compute_90 PTX
# so newer GPUs JIT it), linked against libtorch_cuda, cudart and NCCL. zt_base dlopens it on
# first CUDA use (base/cuda_plugin.h).
enable_language(CUDA)
if(CMAKE_CUDA_FLAGS_RELEASE STREQUAL "-O3 -DNDEBUG")  # -O2 like the C++ (CMakeLists.txt)
  set(CMAKE_CUDA_FLAGS_RELEASE "-O2 -DNDEBUG")
endif()
if(NOT CMAKE_CUDA_ARCHITECTURES OR CMAKE_CUDA_ARCHITECTURES STREQUAL "52")
  set(CMAKE_CUDA_ARCHITECTURES 90)
endif()
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
find_package(CUDAToolkit REQUIRED)
# NCCL: ZT_NCCL_ROOT first (e.g. the nvidia-nccl wheel next to torch: site-packages/nvidia/nccl,
# whose lib/ has only libnccl.so.2), then the CUDA toolkit.
set(ZT_NCCL_ROOT "" CACHE PATH "NCCL prefix with include/nccl.h and lib/libnccl.so[.2]")
find_library(ZT_NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR
             HINTS ${ZT_NCCL_ROOT}/lib ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64 REQUIRED)
find_path(ZT_NCCL_INCLUDE nccl.h
          HINTS ${ZT_NCCL_ROOT}/include ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include REQUIRED)

set(_zt_cuda_srcs)
foreach(area base parallel optim data weights core)
  file(GLOB_RECURSE _cu CONFIGURE_DEPENDS "${ZT_SOURCE_DIR}/${area}/*.cu"
                                          "${ZT_SOURCE_DIR}/${area}/*_cuda.cpp")
  list(APPEND _zt_cuda_srcs ${_cu})
endforeach()
add_library(zt_cuda MODULE ${_zt_cuda_srcs})
target_include_directories(zt_cuda PRIVATE ${ZT_SOURCE_DIR} ${ZT_NCCL_INCLUDE})
target_link_libraries(zt_cuda PRIVATE zt_core ${TORCH_LIBRARIES} CUDA::cudart ${ZT_NCCL_LIBRARY})
target_compile_definitions(zt_cuda PRIVATE ZT_CUDA_ENABLED=1)
set_target_properties(zt_cuda PROPERTIES BUILD_RPATH "$ORIGIN" CUDA_SEPARABLE_COMPILATION OFF)
target_compile_options(zt_cuda PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-lineinfo>)
if(ZT_WERROR)  # ZtTargets.cmake
  target_compile_options(zt_cuda PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings>)
endif()
zt_warnings(zt_cuda)


