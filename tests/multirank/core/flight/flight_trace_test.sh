#!/usr/bin/env bash
# A rank that skips a stage-3 unit's gather: rank 1 of 3 (gloo, ztrun native) skips unit u1 in
# its second step, so its all-gathers stop matching the others'. The job must fail within the
# 5 s communicator timeout, every rank must leave a flight recorder dump, and zt-trace's first
# line must name rank 1 and the collective where the ranks diverged.
#   flight_trace_test.sh ZTRUN PROBE ZT_TRACE WORK_DIR
set -uo pipefail
ztrun="$1"; probe="$2"; zt_trace="$3"; work="$4"
rm -rf "$work"; mkdir -p "$work"
export ZT_FLIGHT_DIR="$work/flight"
timeout -s KILL 120 "$ztrun" --standalone --nproc-per-node 3 --transport native \
  "$probe" --skip-rank 1 --timeout-s 5 > "$work/log" 2>&1
rc=$?
fail() { echo "FAIL: $*"; tail -30 "$work/log"; exit 1; }
[ "$rc" != 0 ] || fail "the job succeeded although rank 1 skipped a gather"
grep -q "probe: rank .* finished" "$work/log" && fail "a rank finished training"
for r in 0 1 2; do
  [ -s "$ZT_FLIGHT_DIR/flight_r$r.json" ] || fail "no dump from rank $r"
done
"$zt_trace" "$ZT_FLIGHT_DIR" > "$work/trace" 2>&1 || fail "zt-trace failed: $(cat "$work/trace")"
cat "$work/trace"
head -1 "$work/trace" |
  grep -qE "^zt-trace: world collective #[0-9]+ diverged: rank 1 called all_gather [0-9]+ B Float where ranks 0,2 called all_gather [0-9]+ B Float" ||
  fail "zt-trace's verdict does not name rank 1 and the diverging gather"
# --verbose adds the per-collective table.
"$zt_trace" --verbose "$ZT_FLIGHT_DIR" | grep -qE "^  #[0-9]+ all_gather" ||
  fail "zt-trace --verbose has no per-collective table"
echo "ok: $(head -1 "$work/trace")"
