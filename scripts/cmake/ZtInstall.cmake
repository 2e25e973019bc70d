# `cmake --install build --prefix P`: the libraries, the CUDA plugin (when built), the tools and
# the public headers under P, with the CMake package zerotorch, so that a program outside this
# tree does
#
#   find_package(zerotorch REQUIRED)          # P on CMAKE_PREFIX_PATH (or zerotorch_DIR)
#   target_link_libraries(my_train PRIVATE zerotorch::zerotorch)
#
# Layout: P/include/zerotorch/{core,parallel,optim,data}/**.h (included as "core/engine.h"),
# P/lib/libzt_*.so (zt_tokenizer: SentencePiece, linked only by programs that tokenize; see
# data/CMakeLists.txt) and libzt_cuda.so (zt_core loads the plugin from its own folder),
# P/bin/{ztrun,zt-config,zt-pretokenize,zt-consolidate}, P/lib/cmake/zerotorch/. Installed
# binaries find their libraries through RPATH ($ORIGIN, and LibTorch's folder as linked).
include(CMakePackageConfigHelpers)

set(ZT_INSTALL_CMAKEDIR lib/cmake/zerotorch)
set(_zt_libs zt_base zt_parallel zt_optim zt_data zt_core)
if(TARGET zt_tensorboard)
  list(APPEND _zt_libs zt_tensorboard)  # TensorBoard event files (core/monitor), zt_core needs it
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

foreach(tool ztrun zt-config zt-pretokenize zt-consolidate)
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

foreach(area core parallel optim data)
  install(DIRECTORY ${ZT_SOURCE_DIR}/${area}/ DESTINATION include/zerotorch/${area}
          FILES_MATCHING PATTERN "*.h" PATTERN "tools" EXCLUDE)
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
