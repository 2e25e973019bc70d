#!/usr/bin/env bash
# Cross-run checkpoint checks: each step is its own mpirun, all against one directory.
#   2 ranks stage 1 save "a" -> zt-consolidate + Python interop
#   3 ranks stage 3 load "a" (2 -> 3, stage 1 -> 3), resave "b3"
#   2 ranks stage 2 load "b3" (3 -> 2, stage 3 -> 2)
#   4 ranks stage 3 load "a" (2 -> 4), resave "b4"; 1 rank stage 1 loads "b4" (4 -> 1)
#   2 ranks stage 3 bf16 save_16bit_model -> Python reads the bf16 weights
#   kill -9 during a save of "k": `latest` still names the previous tag, which loads.
# usage: checkpoint_cross_run.sh TEST_BIN CONSOLIDATE_BIN WORK_DIR CHECK_PY HOLD_LIB
# (HOLD_LIB: tests/support/hold_shard_writes.cpp, which holds a shard under its temporary name)
set -euo pipefail
bin=$1 consolidate=$2 dir=$3 check_py=$4 hold=$5
py=${ZT_PYTHON:-$HOME/.cache/zerotorch/venv-torch-2.11.0/bin/python}
rm -rf "$dir" && mkdir -p "$dir"
mpi=(mpirun --oversubscribe)
[ "$(id -u)" = 0 ] && mpi+=(--allow-run-as-root)
run() {  # run NP STAGE FILTER [ENV=VALUE...]
  local np=$1 stage=$2 filter=$3
  shift 3
  echo "== np $np stage $stage $filter $*"
  env ZT_CKPT_DIR="$dir" ZT_CKPT_STAGE="$stage" "$@" \
    "${mpi[@]}" -np "$np" "$bin" --gtest_filter="$filter" --gtest_brief=1
}

run 2 1 CrossRun.Save ZT_CKPT_TAG=a
/usr/bin/time -v "$consolidate" "$dir" "$dir/a.safetensors" --tag a 2> "$dir/time.txt"
grep "Maximum resident" "$dir/time.txt"
"$py" "$check_py" "$dir/a.safetensors" "$dir/ref"

run 2 3 CrossRun.Save16bit
"$py" "$check_py" "$dir/m16.safetensors" "$dir/ref16" bfloat16

run 3 3 CrossRun.LoadReshardedAndContinue ZT_CKPT_LOAD_TAG=a ZT_CKPT_RESAVE_TAG=b3
run 2 2 CrossRun.LoadReshardedAndContinue ZT_CKPT_LOAD_TAG=b3
run 4 3 CrossRun.LoadReshardedAndContinue ZT_CKPT_LOAD_TAG=a ZT_CKPT_RESAVE_TAG=b4
run 1 1 CrossRun.LoadReshardedAndContinue ZT_CKPT_LOAD_TAG=b4

# kill -9 midway: every rank pauses after fsyncing its shard under the temporary name.
before=$(cat "$dir/latest")
rm -f "$dir"/pid_r*
run 2 1 CrossRun.Save ZT_CKPT_TAG=k LD_PRELOAD="$hold" ZT_TEST_HOLD_SHARD_RENAME_S=120 &
launcher=$!
for _ in $(seq 600); do
  [ -e "$dir/k/shard_r00000.zts.tmp" ] && [ -e "$dir/k/shard_r00001.zts.tmp" ] && break
  sleep 0.1
done
[ -e "$dir/k/shard_r00001.zts.tmp" ] || { echo "save never reached the pause"; exit 1; }
kill -9 "$(cat "$dir/pid_r0")" "$(cat "$dir/pid_r1")"
wait "$launcher" && { echo "killed save exited 0"; exit 1; }
after=$(cat "$dir/latest")
[ "$before" = "$after" ] || { echo "latest changed to $after by a killed save"; exit 1; }
[ ! -e "$dir/k/metadata.ztm" ] || { echo "killed save left metadata"; exit 1; }
run 2 1 CrossRun.LoadReshardedAndContinue ZT_CKPT_LOAD_TAG=
echo "cross-run checkpoint checks passed"
