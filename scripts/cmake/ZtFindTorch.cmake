# Finds LibTorch (find_package(Torch)), for this project and for programs that use the installed
# zerotorch package (zerotorchConfig.cmake includes this file). Order: Torch_DIR /
# CMAKE_PREFIX_PATH given by the user (a LibTorch zip works), else the project's virtualenv
# (ZT_VENV, default ~/.cache/zerotorch/venv-torch-2.11.0) made by scripts/setup.sh, else
# ZT_TORCH_FALLBACK_DIR (the installed package sets it to the LibTorch zerotorch was built with).

set(ZT_TORCH_VERSION "2.11.0" CACHE STRING "torch version of the project's virtualenv")
if(DEFINED ENV{ZT_VENV})
  set(_zt_venv_default "$ENV{ZT_VENV}")
else()
  set(_zt_venv_default "$ENV{HOME}/.cache/zerotorch/venv-torch-${ZT_TORCH_VERSION}")
endif()
set(ZT_VENV "${_zt_venv_default}" CACHE PATH "virtualenv holding the torch wheel")

if(NOT Torch_DIR AND EXISTS "${ZT_VENV}/bin/python")
  execute_process(
    COMMAND "${ZT_VENV}/bin/python" -c "import torch; print(torch.utils.cmake_prefix_path)"
    OUTPUT_VARIABLE _zt_torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _zt_rc)
  if(_zt_rc EQUAL 0)
    list(APPEND CMAKE_PREFIX_PATH "${_zt_torch_prefix}")
  endif()
endif()
set(ZT_PYTHON "${ZT_VENV}/bin/python" CACHE FILEPATH "python of the project's virtualenv")

# The wheel's Torch config wants the CUDA toolkit even for CPU builds; point it at nvcc when
# present, and name the arch explicitly since no GPU is here to detect (Hopper, sm_90).
include(CheckLanguage)
if(NOT ZT_WITH_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc AND NOT DEFINED ENV{CUDACXX})
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
endif()
if(NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST} AND NOT TORCH_CUDA_ARCH_LIST)
  set(TORCH_CUDA_ARCH_LIST "9.0")
  set(ENV{TORCH_CUDA_ARCH_LIST} "9.0")
endif()
if(CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
  set(ENV{CUDACXX} "${CMAKE_CUDA_COMPILER}")
endif()
# Torch's own NVTX lookup and the CUDA toolkit location.
if(EXISTS /usr/local/cuda AND NOT CUDAToolkit_ROOT)
  set(CUDAToolkit_ROOT /usr/local/cuda)
endif()

if(NOT Torch_DIR AND NOT _zt_torch_prefix AND ZT_TORCH_FALLBACK_DIR)
  set(Torch_DIR "${ZT_TORCH_FALLBACK_DIR}")
endif()
find_package(Torch REQUIRED)
if(Torch_VERSION AND NOT Torch_VERSION VERSION_GREATER_EQUAL "2.1")
  message(FATAL_ERROR "zerotorch needs LibTorch >= 2.1 (found ${Torch_VERSION} at ${Torch_DIR}); "
                      "run scripts/setup.sh or point Torch_DIR at a newer LibTorch")
endif()
