#!/usr/bin/env bash
# The gloo backend launched the torchrun way (RANK, WORLD_SIZE, LOCAL_*, MASTER_ADDR/PORT; no MPI
# at all): 3 ranks of the collectives test binary rendezvous at a TCPStore on a free port.
# Usage: gloo_torchrun_test.sh <collectives-test-binary> [ranks]
set -u
bin=$1
n=${2:-3}
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
filter='DtypesSizes/Collectives.*Float*:DtypesSizes/Collectives.*BFloat16*:Async.*:Split.*:Timeout.*'
pids=()
for ((r = 0; r < n; r++)); do
  RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    "$bin" --backend=gloo --gtest_filter="$filter" > "${TMPDIR:-/tmp}/zt_gloo_torchrun.$$.$r.log" 2>&1 &
  pids+=($!)
done
status=0
for ((r = 0; r < n; r++)); do
  if ! wait "${pids[$r]}"; then
    echo "rank $r failed:"
    cat "${TMPDIR:-/tmp}/zt_gloo_torchrun.$$.$r.log"
    status=1
  fi
done
grep -h "PASSED\|FAILED" "${TMPDIR:-/tmp}"/zt_gloo_torchrun.$$.*.log
rm -f "${TMPDIR:-/tmp}"/zt_gloo_torchrun.$$.*.log
exit $status
