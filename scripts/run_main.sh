#!/usr/bin/env bash
# The main job: sets up, builds, and runs zerotorch's smoke job on CPU: 2 ranks launched by
# mpirun, each checking a LibTorch all-reduce against its closed form.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ZT_BUILD_DIR:-$root/build}"
bash "$root/scripts/build.sh"
mpi_flags=(--oversubscribe)
[ "$(id -u)" = "0" ] && mpi_flags+=(--allow-run-as-root)
mpirun "${mpi_flags[@]}" -np 2 "$build/bin/zt_allreduce_smoke" --numel 4194304
