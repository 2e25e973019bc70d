#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and builds zerotorch into $ZT_BUILD_DIR (default: build/).
# Extra arguments go to the CMake configure step, e.g. -DZT_WITH_CUDA=OFF. ZT_BUILD_TARGETS (a
# space-separated list) builds only those targets and what they need; unset, everything.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ZT_BUILD_DIR:-$root/build}"
if [ "${ZT_SKIP_SETUP:-0}" != "1" ]; then
  bash "$root/scripts/setup.sh"
fi
jobs="${ZT_JOBS:-$(nproc)}"
# ccache keys on paths relative to the clone, so a fresh clone reuses earlier builds of the
# sources it can cache (those without the precompiled LibTorch headers, scripts/cmake/ZtPch.cmake,
# which ccache passes through). With -g (RelWithDebInfo) it would also hash the build directory:
# off, so clones elsewhere hit too (debug info then names the first builder's directory).
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
echo "[build] configuring $build"
mkdir -p "$build"
cmake -S "$root" -B "$build" -G Ninja "$@" >"$build/configure.log" 2>&1 || {
  cat "$build/configure.log"; echo "[build] error: CMake configure failed (log above)" >&2; exit 1; }
echo "[build] building with $jobs jobs"
start=$(date +%s)
# shellcheck disable=SC2086  # the target list splits on spaces
cmake --build "$build" -j "$jobs" ${ZT_BUILD_TARGETS:+--target $ZT_BUILD_TARGETS}
echo "[build] done in $(( $(date +%s) - start )) s"
# The Python package is assembled in $build/python (python/CMakeLists.txt); a .pth file in the
# project's virtualenv puts it on that python's path, so `import zerotorch` works after a build.
if [ -d "$build/python/zerotorch" ]; then
  py="$(sed -n 's/^ZT_PYTHON:FILEPATH=//p' "$build/CMakeCache.txt")"
  if [ -x "$py" ]; then
    site="$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    echo "$build/python" >"$site/zerotorch-build.pth"
  fi
fi
