#!/bin/bash
# ztrun --nnodes MIN:MAX on one machine: several ztruns on 127.0.0.1 form an elastic job (the
# first to bind the rendezvous port hosts it), with a shell rank program that prints its launch
# facts. Checks: a node lost mid-round makes the others go on in a smaller round and a node that
# joins makes a bigger one (ZT_RESTART_COUNT = the round); too few nodes for join_timeout, failures
# past --max-restarts, a node of another job and a lost rendezvous host each end in one line and
# exit 1 within seconds; a failure inside --max-restarts restarts every node.
#
# usage: ztrun_elastic.sh ZTRUN
set -euo pipefail
ztrun="$1"
work="$(mktemp -d /tmp/zt_elastic.XXXXXX)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  for f in "$work"/*.log; do echo "--- $f"; cat "$f"; done >&2
  echo "FAIL: $*"
  exit 1
}

cat >"$work/rank.sh" <<'EOF'
#!/bin/bash
echo "fact rank=$RANK world=$WORLD_SIZE local=$LOCAL_RANK group=$GROUP_RANK" \
  "restart=$ZT_RESTART_COUNT"
if [ "${FAIL_RANK:-}" = "$RANK" ] && [ "$ZT_RESTART_COUNT" -lt "${FAIL_BELOW:-1000}" ]; then
  exit 3
fi
sleep "${SLEEP:-3}"
EOF
chmod +x "$work/rank.sh"

# start NAME PORT NPROC [ztrun flags...]: a node in the background, output in NAME.log; $RDZV
# adds to --rdzv-conf.
start() {
  local name="$1" port="$2" nproc="$3"
  shift 3
  "$ztrun" --master-port "$port" --nproc-per-node "$nproc" \
    --rdzv-conf "last_call_timeout=3,keep_alive_interval=1${RDZV:+,$RDZV}" "$@" "$work/rank.sh" \
    >"$work/$name.log" 2>&1 &
  pids+=($!)
  eval "pid_$name=\$!"
}
finish() {  # NAME: waits, sets rc_NAME
  local p rc=0
  p="$(eval echo "\$pid_$1")"
  wait "$p" || rc=$?
  eval "rc_$1=$rc"
}

# 1. Loss and join: a (2 ranks, hosts) + b (1 rank) -> b killed -> a alone -> c joins.
SLEEP=6 start a 29700 2 --nnodes 1:2 --max-restarts 3
sleep 0.5
SLEEP=6 start b 29700 1 --nnodes 1:2 --max-restarts 3
# Mid-round: every rank of round 0 has started (node a's too, whose facts the checks below read).
for _ in $(seq 100); do
  grep -q "fact rank=2 world=3" "$work/b.log" && grep -q "fact rank=0 world=3" "$work/a.log" &&
    grep -q "fact rank=1 world=3" "$work/a.log" && break
  sleep 0.1
done
kill -9 "$pid_b"
t_kill=$(date +%s.%N)
for _ in $(seq 100); do grep -q "restart=1" "$work/a.log" && break; sleep 0.1; done
t_round=$(date +%s.%N)
SLEEP=6 start c 29700 1 --nnodes 1:2 --max-restarts 3
finish a
finish c
[ "$rc_a" = 0 ] && [ "$rc_c" = 0 ] || fail "loss/join: exit codes $rc_a/$rc_c"
grep -q "rendezvous: round 0 stopped: node 1 (.*) lost its ztrun" "$work/a.log" ||
  fail "no loss line"
grep -q "rendezvous: round 1 stopped: node .* joined" "$work/a.log" || fail "no join line"
for want in "rank=0 world=3 local=0 group=0 restart=0" "rank=1 world=2 local=1 group=0 restart=1" \
             "rank=0 world=3 local=0 group=0 restart=2"; do
  grep -q "fact $want" "$work/a.log" || fail "node a lacks '$want'"
done
grep -q "fact rank=2 world=3 local=0 group=1 restart=2" "$work/c.log" || fail "node c's facts"
grep -q "the elastic job finished on every node" "$work/c.log" || fail "node c was not told the end"
after=$(awk "BEGIN {printf \"%.1f\", $t_round - $t_kill}")
echo "PASS: loss and join: worlds 3 -> 2 -> 3, new round $after s after the kill"

# 2. Fewer than MIN nodes for join_timeout.
RDZV=join_timeout=2 start short 29710 1 --nnodes 2:2
finish short
[ "$rc_short" = 1 ] || fail "join_timeout: exit code $rc_short"
grep -q "only 1 of at least 2 nodes joined within join_timeout (2 s)" "$work/short.log" ||
  fail "join_timeout: no line"
echo "PASS: too few nodes end the job after join_timeout"

# 3. A rank failure with no restarts left ends every node, naming the rank.
FAIL_RANK=2 start f0 29720 2 --nnodes 2:2
sleep 0.5
FAIL_RANK=2 start f1 29720 1 --nnodes 2:2
start_s=$(date +%s)
finish f0
finish f1
[ "$rc_f0" = 1 ] && [ "$rc_f1" = 1 ] || fail "failure: exit codes $rc_f0/$rc_f1"
[ $(( $(date +%s) - start_s )) -lt 20 ] || fail "failure: the nodes took too long to stop"
for f in f0 f1; do
  grep -q "the elastic job ended: rank 2 (local rank 0) exited with code 3; no restarts left" \
    "$work/$f.log" || fail "failure: $f does not name rank 2"
  grep -q "no restarts left (--max-restarts 0)" "$work/$f.log" || fail "failure: $f's reason"
done
echo "PASS: a failure past --max-restarts ends every node, naming the rank"

# 4. A failure inside --max-restarts restarts every node once.
FAIL_RANK=0 FAIL_BELOW=1 SLEEP=1 start r0 29730 2 --nnodes 2:2 --max-restarts 1
sleep 0.5
FAIL_RANK=0 FAIL_BELOW=1 SLEEP=1 start r1 29730 1 --nnodes 2:2 --max-restarts 1
finish r0
finish r1
[ "$rc_r0" = 0 ] && [ "$rc_r1" = 0 ] || fail "restart: exit codes $rc_r0/$rc_r1"
grep -q "fact rank=2 world=3 local=0 group=1 restart=1" "$work/r1.log" || fail "restart: node 1"
echo "PASS: a failure within --max-restarts restarts every node"

# 5. A node of another job is refused.
SLEEP=4 start j0 29740 1 --nnodes 1:2 --rdzv-id jobA
sleep 0.5
start j1 29740 1 --nnodes 1:2 --rdzv-id jobB
finish j1
[ "$rc_j1" = 1 ] || fail "rdzv-id: exit code $rc_j1"
grep -q "this node belongs to job 'jobB', the rendezvous at this address runs job 'jobA'" \
  "$work/j1.log" || fail "rdzv-id: no line"
finish j0
[ "$rc_j0" = 0 ] || fail "rdzv-id: the host's own job failed ($rc_j0)"
echo "PASS: a node of another job is refused"

# 6. The rendezvous host lost: the other node stops its ranks and exits 1 at once.
SLEEP=30 start h0 29750 1 --nnodes 1:2
sleep 0.5
SLEEP=30 start h1 29750 1 --nnodes 1:2
for _ in $(seq 100); do grep -q "fact rank=1" "$work/h1.log" && break; sleep 0.1; done
kill -9 "$pid_h0"
start_s=$(date +%s)
finish h1
[ "$rc_h1" = 1 ] || fail "host lost: exit code $rc_h1"
[ $(( $(date +%s) - start_s )) -lt 15 ] || fail "host lost: node 1 took too long"
grep -q "the elastic job ended: the rendezvous host 127.0.0.1:29751 closed the connection" \
  "$work/h1.log" || fail "host lost: no line"
echo "PASS: a lost rendezvous host ends the other nodes"

# 7. A node that stops answering (its ztrun frozen: connection open, no heartbeats) is lost after
# keep_alive_max_attempt (3) x keep_alive_interval (1 s); the host goes on alone.
SLEEP=8 start p0 29760 1 --nnodes 1:2 --max-restarts 1
sleep 0.5
SLEEP=8 start p1 29760 1 --nnodes 1:2 --max-restarts 1
for _ in $(seq 100); do grep -q "fact rank=1 world=2" "$work/p1.log" && break; sleep 0.1; done
kill -STOP "$pid_p1"
start_s=$(date +%s.%N)
for _ in $(seq 150); do grep -q "fact rank=0 world=1" "$work/p0.log" && break; sleep 0.1; done
lost_s=$(awk "BEGIN {printf \"%.1f\", $(date +%s.%N) - $start_s}")
kill -9 "$pid_p1"
finish p0
[ "$rc_p0" = 0 ] || fail "heartbeat: the host's exit code $rc_p0"
grep -q "rendezvous: round 0 stopped: node 1 (.*) missed 3 heartbeats" "$work/p0.log" ||
  fail "heartbeat: no loss line"
awk "BEGIN {exit !($lost_s >= 2 && $lost_s < 8)}" || fail "heartbeat: lost after $lost_s s"
echo "PASS: a frozen node is lost after its missed heartbeats (new round $lost_s s after it froze)"
