#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and builds zerotorch into $ZT_BUILD_DIR (default: build/).
# Extra arguments go to the CMake configure step, e.g. -DZT_WITH_CUDA=OFF.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ZT_BUILD_DIR:-$root/build}"
if [ "${ZT_SKIP_SETUP:-0}" != "1" ]; then
  bash "$root/scripts/setup.sh"
fi
jobs="${ZT_JOBS:-$(nproc)}"
# ccache keys on paths relative to the clone, so a fresh clone (CI) reuses earlier builds. The
# build has -g, for which ccache would also hash the build directory: off, so clones elsewhere
# hit too (debug info then names the first builder's directory, which nothing here reads).
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
echo "[build] configuring $build"
mkdir -p "$build"
cmake -S "$root" -B "$build" -G Ninja "$@" >"$build/configure.log" 2>&1 || {
  cat "$build/configure.log"; echo "[build] error: CMake configure failed (log above)" >&2; exit 1; }
echo "[build] building with $jobs jobs"
start=$(date +%s)
cmake --build "$build" -j "$jobs"
echo "[build] done in $(( $(date +%s) - start )) s"
