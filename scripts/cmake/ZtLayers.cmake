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
#   models    the model families (GPT-2, LLaMA/Qwen2/Mistral, BERT/RoBERTa) with their Hugging
#             Face formats
#   examples  the example programs, their configs and READMEs
#   testdevice the zttest test device (testdevice/test_device.h), a PrivateUse1 backend over host
#             memory for the tests; loaded with dlopen, so no area may use it
# tests/ and bench/ sit above everything and are not checked. Inside core the sub-layers below
# (ZT_CORE_LAYERS) are checked the same way.
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
    "models:base parallel optim weights core"
    "examples:base parallel optim data weights core train models examples"
    "testdevice:")

# Inside core, bottom to top: each sub-layer is the files under core/ that it names (a folder ends
# in /; a file belongs to the first sub-layer that names it, or a folder above it) and the
# sub-layers it may include besides its own. The options are the ground: the config and what the
# engine is told. The mechanisms (asynchronous I/O, precision, profiling, activation
# checkpointing, the CUDA plugin's table, the fused ops) build on options only, ZeRO's parts on
# both, and the engine and checkpointing sit on top.
set(ZT_CORE_LAYERS
    "options=defaults.h engine_options.h engine_options.cpp config/ aio/aio_options.h precision/loss_scaler_options.h activations/activation_checkpoint_options.h profile/flops_profiler_options.h:"
    "mechanisms=aio/ precision/ profile/ activations/ cuda/ ops/:options"
    "zero=zero/:options mechanisms"
    "plan=plan/:options mechanisms zero"
    "engine=engine.h engine_impl.h engine.cpp engine_setup.cpp checkpoint/:options mechanisms zero")

# zt_core_sublayer(<path under core/> <out-name> <out-allowed>): the core sub-layer a file belongs
# to and the sub-layers it may include; empty when no sub-layer names it.
function(zt_core_sublayer path out_name out_allowed)
  foreach(entry IN LISTS ZT_CORE_LAYERS)
    string(REGEX MATCH "^([^=]+)=([^:]*):(.*)$" _ "${entry}")
    set(name "${CMAKE_MATCH_1}")
    separate_arguments(members UNIX_COMMAND "${CMAKE_MATCH_2}")
    separate_arguments(allowed UNIX_COMMAND "${CMAKE_MATCH_3}")
    foreach(m IN LISTS members)
      string(FIND "${path}" "${m}" at)
      if((m MATCHES "/$" AND at EQUAL 0) OR path STREQUAL m)
        set(${out_name} ${name} PARENT_SCOPE)
        set(${out_allowed} ${allowed} PARENT_SCOPE)
        return()
      endif()
    endforeach()
  endforeach()
  set(${out_name} "" PARENT_SCOPE)
  set(${out_allowed} "" PARENT_SCOPE)
endfunction()

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
