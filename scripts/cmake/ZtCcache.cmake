# Use ccache when present: a warm rebuild of an unchanged tree then takes seconds.
find_program(ZT_CCACHE ccache)
if(ZT_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  set(CMAKE_C_COMPILER_LAUNCHER ${ZT_CCACHE})
  set(CMAKE_CXX_COMPILER_LAUNCHER ${ZT_CCACHE})
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${ZT_CCACHE})
  message(STATUS "zerotorch: ccache ${ZT_CCACHE}")
endif()
