#!/usr/bin/env bash
# Fast collective abort: rank 1 of 2 is killed (SIGKILL) or raises (zt::Error) inside a save, an
# all-gather and an all-reduce, under ztrun --transport native (gloo), ztrun --transport mpi
# (mpi, through ztrun's rank shims) and mpirun (mpi), with a 600 s communicator
# timeout. Every case must end within 5 s of the failure, non-zero, with a line naming rank 1,
# and no surviving rank may get past the failed operation (zt_abort_probe).
#   abort_test.sh ZTRUN PROBE WORK_DIR MPIEXEC [MPIEXEC_FLAGS...]
# ZT_ABORT_LAUNCHERS picks the launchers (default "ztrun-native ztrun-mpi mpirun"); "srun" needs a running Slurm
# and MASTER_ADDR/MASTER_PORT for gloo (tests/multirank/launcher/slurm_single_node.sh runs it so).
set -uo pipefail
ztrun="$1"; probe="$2"; work="$3"; mpiexec="$4"; shift 4
mpi_flags=("$@")
[ "$(id -u)" = 0 ] && mpi_flags+=(--allow-run-as-root)
failures=0
for launcher in ${ZT_ABORT_LAUNCHERS:-ztrun-native ztrun-mpi mpirun}; do
  for phase in save gather reduce; do
    for how in kill raise; do
      name="$launcher.$phase.$how"
      dir="$work/$name"
      rm -rf "$dir"; mkdir -p "$dir"
      if [ "${launcher%%-*}" = ztrun ]; then
        cmd=("$ztrun" --standalone --nproc-per-node 2 --transport "${launcher#ztrun-}")
      elif [ "$launcher" = srun ]; then
        cmd=(srun -n 2)
      else
        cmd=("$mpiexec" "${mpi_flags[@]}" -np 2)
      fi
      timeout -s KILL 120 "${cmd[@]}" "$probe" --phase "$phase" --how "$how" --dir "$dir" \
        > "$dir/log" 2>&1 &
      pid=$!
      wait "$pid"; rc=$?
      end=$(date +%s.%N)
      if [ ! -s "$dir/acting" ]; then
        echo "$name: FAIL: the victim never failed (rc $rc)"; tail -20 "$dir/log"
        failures=$((failures + 1)); continue
      fi
      took=$(awk -v a="$(cat "$dir/acting")" -v b="$end" 'BEGIN { printf "%.2f", b - a }')
      named=$(grep -m1 -E "(rank|task) 1([^0-9]|$)" "$dir/log" || true)  # srun says "task 1"
      why=""
      [ "$rc" = 0 ] && why="exit code 0"
      awk -v t="$took" 'BEGIN { exit !(t >= 5) }' && why="$why; took $took s (limit 5 s)"
      [ -z "$named" ] && why="$why; no line names rank 1"
      grep -q "probe: rank .* passed" "$dir/log" && why="$why; a rank got past the failure"
      if [ -n "$why" ]; then
        echo "$name: FAIL:$why"; tail -20 "$dir/log"
        failures=$((failures + 1))
      else
        echo "$name: stopped ${took} s after the failure (rc $rc): $named"
      fi
    done
  done
done
[ "$failures" = 0 ] || { echo "$failures case(s) failed"; exit 1; }
echo "all ranks stopped within 5 s in every case"
