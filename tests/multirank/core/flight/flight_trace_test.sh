#!/usr/bin/env bash
# A rank that skips a stage-3 unit's gather, rank 1 of 3 (gloo, ztrun native), in its second
# step, two ways:
#   mismatch  it skips u1: its gather of u2 meets the others' gather of u1 and the backend fails
#             on the sizes; zt-trace must name rank 1 and the collective where the calls differ;
#   timeout   it skips u2 (the last unit) and stalls: the others time out (3 s) in u2's gather;
#             zt-trace must name rank 1 as never having entered that collective.
# Each way the job must fail, every rank must leave a flight recorder dump, and zt-trace's first
# line must say the above. Then `ztrun --dump PID` on a job hung the second way (long timeout):
# every rank must dump on the forwarded SIGUSR1 and keep running, and zt-trace must show the
# others still waiting.
#   flight_trace_test.sh ZTRUN PROBE ZT_TRACE WORK_DIR
set -uo pipefail
ztrun="$1"; probe="$2"; zt_trace="$3"; work="$4"
rm -rf "$work"; mkdir -p "$work"
failures=0
run_case() {  # NAME VERDICT_REGEX PROBE_ARGS...
  local name="$1" verdict="$2"; shift 2
  local dir="$work/$name"
  mkdir -p "$dir"
  fail() { echo "$name: FAIL: $*"; tail -30 "$dir/log"; failures=$((failures + 1)); }
  local start=$SECONDS
  ZT_FLIGHT_DIR="$dir/flight" timeout -s KILL 120 "$ztrun" --standalone --nproc-per-node 3 \
    --transport native "$probe" --skip-rank 1 "$@" > "$dir/log" 2>&1
  local rc=$?
  [ "$rc" != 0 ] || { fail "the job succeeded although rank 1 skipped a gather"; return; }
  grep -q "probe: rank .* finished" "$dir/log" && { fail "a rank finished training"; return; }
  for r in 0 1 2; do
    [ -s "$dir/flight/flight_r$r.json" ] || { fail "no dump from rank $r"; return; }
  done
  "$zt_trace" "$dir/flight" > "$dir/trace" 2>&1 || { fail "zt-trace failed"; cat "$dir/trace"; return; }
  head -1 "$dir/trace" | grep -qE "$verdict" || { fail "verdict: $(head -1 "$dir/trace")"; return; }
  # --verbose adds the per-collective table.
  "$zt_trace" --verbose "$dir/flight" | grep -qE "^  #[0-9]+ all_gather" ||
    { fail "zt-trace --verbose has no per-collective table"; return; }
  echo "$name: ok in $((SECONDS - start)) s (rc $rc): $(head -1 "$dir/trace")"
  sed -n '2,$p' "$dir/trace"
}
run_case mismatch "^zt-trace: world collective #[0-9]+ diverged: rank 1 called all_gather [0-9]+ B Float where ranks 0,2 called all_gather [0-9]+ B Float" \
  --skip-unit u1 --timeout-s 30
run_case timeout "^zt-trace: rank 1 never entered world collective #[0-9]+ \(all_gather [0-9]+ B\) that ranks 0,2 waited in \(timed-out\)" \
  --skip-unit u2 --stall-s 20 --timeout-s 3
grep -q "collective timeout" "$work/timeout/flight/flight_r0.json" 2>/dev/null ||
  grep -q "timed-out" "$work/timeout/flight/flight_r0.json" ||
  { echo "timeout: FAIL: rank 0's dump does not record the timeout"; failures=$((failures + 1)); }
# ztrun --dump on the running job.
dir="$work/dump"; mkdir -p "$dir"
ZT_FLIGHT_DIR="$dir/flight" timeout -s KILL 120 "$ztrun" --standalone --nproc-per-node 3 \
  --transport native "$probe" --skip-rank 1 --skip-unit u2 --stall-s 60 --timeout-s 60 \
  > "$dir/log" 2>&1 &
job=$!
for _ in $(seq 100); do  # until rank 0 waits in the last forward's gather
  grep -q "engine: ZeRO stage 3" "$dir/log" && break
  sleep 0.1
done
sleep 2
ztrun_pid=$(pgrep -P "$job" -x ztrun)  # $job is timeout's pid
"$ztrun" --dump "$ztrun_pid" > "$dir/dump.out" 2>&1 || { echo "dump: FAIL: ztrun --dump failed"; cat "$dir/dump.out"; }
for _ in $(seq 50); do
  [ "$(ls "$dir/flight" 2>/dev/null | grep -c '^flight_r[0-9]*\.json$')" = 3 ] && break
  sleep 0.1
done
sleep 0.5
alive=0; kill -0 "$ztrun_pid" 2>/dev/null && alive=1
"$zt_trace" "$dir/flight" > "$dir/trace" 2>&1; trace_rc=$?
kill -TERM "$ztrun_pid" 2>/dev/null; wait "$job" 2>/dev/null  # (the ranks dump again on SIGTERM)
if [ "$alive" != 1 ]; then
  echo "dump: FAIL: the job ended on the dump request"; tail -20 "$dir/log"; failures=$((failures + 1))
elif [ "$trace_rc" != 0 ] ||
     ! grep -q "rank 0 (SIGUSR1) rank 1 (SIGUSR1) rank 2 (SIGUSR1)" "$dir/trace" ||
     ! head -1 "$dir/trace" | grep -qE "^zt-trace: rank 1 never entered world collective #[0-9]+ .* that ranks 0,2 waited in \(started\)"; then
  echo "dump: FAIL:"; cat "$dir/trace"; tail -20 "$dir/log"; failures=$((failures + 1))
else
  echo "dump: ok: $(sed -n 2p "$dir/trace"): $(head -1 "$dir/trace")"
fi
[ "$failures" = 0 ] || { echo "$failures case(s) failed"; exit 1; }
