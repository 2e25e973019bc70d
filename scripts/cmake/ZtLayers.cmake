# The layers: each top-level area and the areas its code may include and link, bottom to top.
# The one place this is written: zt_library() links an area's library to the libraries of the
# areas named here, and the layer check (scripts/cmake/ZtLayerCheck.cmake, `ctest -R layer`)
# fails when a file of an area includes a header of an area not named for it.
#
#   base      errors, logging, environment names, fatal exit, the CUDA plugin loader (no LibTorch)
#   parallel  launch environment, rendezvous store, communicators and their backends
#   optim     optimizers on flat fp32 shards, LR schedules, parameter groups, clipping
#   data      token shards, the length-bucketed sampler, collation, the loader
#   weights   weight files: binary records, safetensors reading and writing, shard-range sources
#   core      the engine: ZeRO (flat layout, buckets, sharded step, offload), precision,
#             zerotorch checkpoints and export, the DeepSpeed config
#   train     the training run: zt::launch / zt::initialize, batch stream, resume policy,
#             monitors, TrainingRun
#   python    the Python package's C++ extension (python/csrc), zerotorch._C
#   launcher  ztrun
#   tools     the installed programs zt-config, zt-consolidate and zt-from-deepspeed
#   examples  the example models and their programs
#   testdevice the zttest test device (testdevice/test_device.h), a PrivateUse1 backend over host
#             memory for the tests; loaded with dlopen, so no area may use it
# tests/ and bench/ sit above everything and are not checked.
set(ZT_LAYERS
    "base:"
    "parallel:base"
    "optim:base"
    "data:base"
    "weights:base"
    "core:base parallel optim weights"
    "train:base parallel optim data weights core"
    "python:base parallel optim data weights core train"
    "launcher:base"
    "tools:base parallel optim data weights core train"
    "examples:base parallel optim data weights core train examples"
    "testdevice:")

# zt_layer_deps(<area> <out-var>): the areas <area> may use.
function(zt_layer_deps area out)
  foreach(entry IN LISTS ZT_LAYERS)
    string(REPLACE ":" ";" parts "${entry}")
    list(GET parts 0 name)
    if(name STREQUAL area)
      list(LENGTH parts n)
      set(deps "")
      if(n GREATER 1)
        list(GET parts 1 deps)
        separate_arguments(deps UNIX_COMMAND "${deps}")
      endif()
      set(${out} ${deps} PARENT_SCOPE)
      return()
    endif()
  endforeach()
  message(FATAL_ERROR "zt_layer_deps: no layer named ${area} in ZT_LAYERS")
endfunction()
