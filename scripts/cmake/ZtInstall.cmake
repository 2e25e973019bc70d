# `cmake --install build --prefix P`: the libraries, the CUDA plugin (when built), the tools and
# the public headers under P, with the CMake package zerotorch, so that a program outside this
# tree does
#
#   find_package(zerotorch REQUIRED)          # P on CMAKE_PREFIX_PATH (or zerotorch_DIR)
#   target_link_libraries(my_train PRIVATE zerotorch::zerotorch)
#
# Layout: P/include/zerotorch/<area>/**.h (the public headers, below; included as
# "core/engine.h"),
# P/lib/libzt_*.so (zt_tokenizer: SentencePiece, linked only by programs that tokenize; see
# data/CMakeLists.txt) and libzt_cuda.so (zt_base loads the plugin from its own folder),
# P/bin/{ztrun,zt-config,zt-pretokenize,zt-consolidate,zt-from-deepspeed,zt-trace},
# P/lib/cmake/zerotorch/. Installed binaries find their libraries through RPATH ($ORIGIN, and
# LibTorch's folder as linked).
include(CMakePackageConfigHelpers)

set(ZT_INSTALL_CMAKEDIR lib/cmake/zerotorch)
set(_zt_libs zt_base zt_parallel zt_optim zt_data zt_weights zt_core)
if(TARGET zt_train)
  list(APPEND _zt_libs zt_train zt_tensorboard)  # zt_tensorboard: train/monitor's event files
endif()
if(TARGET zt_tokenizer)
  list(APPEND _zt_libs zt_tokenizer)  # zerotorch::zt_tokenizer, linked on demand (data/)
endif()
set_target_properties(${_zt_libs} PROPERTIES INSTALL_RPATH "$ORIGIN"
                                             INSTALL_RPATH_USE_LINK_PATH TRUE)
install(TARGETS ${_zt_libs} zt_torch_cpu zerotorch EXPORT zerotorchTargets
        LIBRARY DESTINATION lib ARCHIVE DESTINATION lib RUNTIME DESTINATION bin
        INCLUDES DESTINATION include/zerotorch)
install(EXPORT zerotorchTargets NAMESPACE zerotorch:: DESTINATION ${ZT_INSTALL_CMAKEDIR})

foreach(tool ztrun zt-config zt-pretokenize zt-consolidate zt-from-deepspeed zt-trace)
  if(TARGET ${tool})
    set_target_properties(${tool} PROPERTIES INSTALL_RPATH "$ORIGIN/../lib"
                                             INSTALL_RPATH_USE_LINK_PATH TRUE)
    install(TARGETS ${tool} RUNTIME DESTINATION bin)
  endif()
endforeach()
if(TARGET zt_cuda)
  set_target_properties(zt_cuda PROPERTIES INSTALL_RPATH "$ORIGIN" INSTALL_RPATH_USE_LINK_PATH TRUE)
  install(TARGETS zt_cuda LIBRARY DESTINATION lib)
endif()

# The public API: the headers a training program includes (what the examples and
# tests/install/project use), and every project header they include in turn, found by following
# the includes. Only these are installed; the engine's parts behind Engine::Impl (buckets,
# gradient sync, the sharded step, offload, NVMe I/O) are not.
set(ZT_PUBLIC_HEADERS
    base/error.h base/logging.h base/main_guard.h
    train/initialize.h train/training_run.h train/batch_stream.h train/checkpointing.h
    train/freeze.h train/metrics_log.h train/parameter_snapshot.h train/rank_sum.h
    train/cpu_memory_meter.h train/load_by_name.h train/swa_weights.h train/monitor/monitor.h
    train/memory_check.h train/activation_probe.h train/memory_peaks.h
    core/engine.h core/zero/call_unit.h core/zero/units.h core/zero/partitioned_init.h
    core/checkpoint/checkpoint.h core/checkpoint/model_export.h core/config/config.h
    core/config/cli_options.h core/config/engine_config.h core/config/program_block.h
    core/config/memory_estimate.h
    weights/safetensors_reader.h weights/safetensors_writer.h weights/safetensors_set.h
    weights/safetensors_weights.h
    data/token_shard_writer.h data/token_dataset.h data/batch_sampler.h data/collator.h
    data/loader.h data/text_reader.h data/tokenizer.h data/text_dataset.h
    parallel/dist.h parallel/communicator.h optim/lr_schedule.h)

# zt_header_closure(<out-var> <header>...): the headers given and every project header they
# include, transitively (paths relative to the source root).
function(zt_header_closure out)
  set(todo ${ARGN})
  set(seen)
  while(todo)
    list(POP_FRONT todo h)
    if(h IN_LIST seen OR NOT EXISTS ${ZT_SOURCE_DIR}/${h})
      continue()
    endif()
    list(APPEND seen ${h})
    file(STRINGS ${ZT_SOURCE_DIR}/${h} lines REGEX "^[ \t]*#[ \t]*include[ \t]+\"[^\"]+\"")
    foreach(line IN LISTS lines)
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]+\"([^\"]+)\".*" "\\1" inc "${line}")
      list(APPEND todo ${inc})
    endforeach()
  endwhile()
  list(SORT seen)
  set(${out} ${seen} PARENT_SCOPE)
endfunction()

zt_header_closure(_zt_installed_headers ${ZT_PUBLIC_HEADERS})
# The engine's parts stay behind Engine::Impl: a public header that reaches one would install it
# and rebuild every user program when ZeRO changes.
foreach(h IN LISTS _zt_installed_headers)
  if(h MATCHES "^core/zero/(bucket|grad_|sharded_step|master_store|host_offload|nvme_)")
    message(FATAL_ERROR "ZtInstall: the public headers reach ${h}, one of the engine's parts")
  endif()
endforeach()
foreach(h IN LISTS _zt_installed_headers)
  get_filename_component(dir ${h} DIRECTORY)
  install(FILES ${ZT_SOURCE_DIR}/${h} DESTINATION include/zerotorch/${dir})
endforeach()

# What the package needs to know about this build: which optional dependencies zt_* link
# publicly, and the LibTorch it was built with (the last fallback of ZtFindTorch.cmake).
set(ZT_PACKAGE_HAVE_MPI ${ZT_HAVE_MPI})
set(ZT_PACKAGE_HAVE_CONFIG ${ZT_HAVE_CONFIG})
set(ZT_PACKAGE_TORCH_DIR ${Torch_DIR})
configure_package_config_file(${ZT_SOURCE_DIR}/scripts/cmake/zerotorchConfig.cmake.in
                              ${ZT_BINARY_DIR}/zerotorchConfig.cmake
                              INSTALL_DESTINATION ${ZT_INSTALL_CMAKEDIR})
write_basic_package_version_file(${ZT_BINARY_DIR}/zerotorchConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${ZT_BINARY_DIR}/zerotorchConfig.cmake ${ZT_BINARY_DIR}/zerotorchConfigVersion.cmake
              ${ZT_SOURCE_DIR}/scripts/cmake/ZtFindTorch.cmake
        DESTINATION ${ZT_INSTALL_CMAKEDIR})
