#!/usr/bin/env bash
# kill -9 inside a background checkpoint write (core/checkpoint/async_checkpoint.h):
#   2 ranks save "a" synchronously (CrossRun.Save), then a run starts a background save of "k"
#   whose shard stays under its temporary name (HOLD_LIB, tests/support/hold_shard_writes.cpp)
#   while it trains two more steps; once
#   both ranks have trained on, both are killed. `latest` must still name "a", "k" must have no
#   metadata, and "a" must load and train on.
# usage: async_checkpoint_kill.sh TEST_BIN WORK_DIR HOLD_LIB
set -euo pipefail
bin=$1 dir=$2 hold=$3
rm -rf "$dir" && mkdir -p "$dir"
mpi=(mpirun --oversubscribe)
[ "$(id -u)" = 0 ] && mpi+=(--allow-run-as-root)
run() {  # run NP FILTER [ENV=VALUE...]
  local np=$1 filter=$2
  shift 2
  echo "== np $np $filter $*"
  env ZT_CKPT_DIR="$dir" ZT_CKPT_STAGE=3 "$@" \
    "${mpi[@]}" -np "$np" "$bin" --gtest_filter="$filter" --gtest_brief=1
}

run 2 CrossRun.Save ZT_CKPT_TAG=a
[ "$(cat "$dir/latest")" = a ] || { echo "latest is not a after the first save"; exit 1; }
rm -f "$dir"/pid_r*
run 2 CrossRun.SaveAsync ZT_CKPT_TAG=k LD_PRELOAD="$hold" ZT_TEST_HOLD_SHARD_RENAME_S=120 &
launcher=$!
for _ in $(seq 600); do
  [ -e "$dir/continued_r0" ] && [ -e "$dir/continued_r1" ] && break
  sleep 0.1
done
[ -e "$dir/continued_r0" ] && [ -e "$dir/continued_r1" ] ||
  { echo "training did not go on during the background write"; exit 1; }
[ -e "$dir/k/shard_r00000.zts.tmp" ] || { echo "the background write had not started"; exit 1; }
kill -9 "$(cat "$dir/pid_r0")" "$(cat "$dir/pid_r1")"
wait "$launcher" && { echo "killed run exited 0"; exit 1; }
[ "$(cat "$dir/latest")" = a ] || { echo "latest changed by a killed background save"; exit 1; }
[ ! -e "$dir/k/metadata.ztm" ] || { echo "killed background save left metadata"; exit 1; }
run 2 CrossRun.LoadReshardedAndContinue ZT_CKPT_LOAD_TAG=
echo "async checkpoint kill check passed"
