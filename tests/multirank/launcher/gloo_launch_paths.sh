#!/bin/bash
# The project's own discovery and communicators under each launcher: zt_launch_gloo_probe run by
# `ztrun --transport native --nproc-per-node 4` (gloo over the TCPStore), by
# `ztrun --transport mpi --nproc-per-node 4` (mpirun under ztrun: backend auto must be mpi) and by
# `mpirun -np 4` (mpi) must reduce correctly and report the same rank, world size, local rank and
# local world size per rank.
#
# usage: gloo_launch_paths.sh ZTRUN GLOO_PROBE MPIRUN [MPIRUN_FLAGS...]
set -euo pipefail
ztrun="$1"
probe="$2"
shift 2
mpirun=("$@")
fail() { echo "FAIL: $*"; exit 1; }

work="$(mktemp -d /tmp/zt_gloo_paths.XXXXXX)"
trap 'rm -rf "$work"' EXIT
trap "exit 143" INT TERM
mkdir -p "$work/ztrun" "$work/ztrun_mpi" "$work/mpirun"

timeout -s KILL 120 "$ztrun" --standalone --transport native --nproc-per-node 4 "$probe" \
  --facts-dir "$work/ztrun" >"$work/ztrun.out" 2>&1 || { cat "$work/ztrun.out"; fail "ztrun launch"; }
timeout -s KILL 120 "$ztrun" --standalone --transport mpi --nproc-per-node 4 "$probe" \
  --facts-dir "$work/ztrun_mpi" >"$work/ztrun_mpi.out" 2>&1 ||
  { cat "$work/ztrun_mpi.out"; fail "ztrun --transport mpi launch"; }
timeout -s KILL 120 "${mpirun[@]}" -np 4 "$probe" --facts-dir "$work/mpirun" \
  >"$work/mpirun.out" 2>&1 || { cat "$work/mpirun.out"; fail "mpirun launch"; }
cat "$work/ztrun.out" "$work/ztrun_mpi.out" "$work/mpirun.out"
for rank in 0 1 2 3; do
  z="$work/ztrun/rank_$rank.txt"
  zm="$work/ztrun_mpi/rank_$rank.txt"
  m="$work/mpirun/rank_$rank.txt"
  grep -q "launcher=torchrun backend=gloo" "$z" || fail "ztrun rank $rank: $(cat "$z")"
  grep -q "launcher=mpi backend=mpi" "$zm" || fail "ztrun --transport mpi rank $rank: $(cat "$zm")"
  grep -q "launcher=mpi backend=mpi" "$m" || fail "mpirun rank $rank: $(cat "$m")"
  [ "$(cut -d' ' -f1-4 "$z")" = "$(cut -d' ' -f1-4 "$m")" ] ||
    fail "rank $rank: ztrun '$(cat "$z")' vs mpirun '$(cat "$m")'"
  [ "$(cut -d' ' -f1-4 "$zm")" = "$(cut -d' ' -f1-4 "$m")" ] ||
    fail "rank $rank: ztrun --transport mpi '$(cat "$zm")' vs mpirun '$(cat "$m")'"
done
grep -q "^\[3\] gloo-probe rank 3: all_reduce sum 10 on mpi ok" "$work/ztrun_mpi.out" ||
  fail "ztrun --transport mpi: no '[3] ... all_reduce sum 10 on mpi ok' line"
echo "PASS: ztrun --transport native (gloo), ztrun --transport mpi (mpi) and mpirun (mpi) give" \
  "the same 4 ranks and the same all_reduce"
