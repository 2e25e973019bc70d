#!/bin/bash
# Two "nodes" on one machine: two network namespaces joined by a veth pair, one
# `ztrun --nnodes 2 --node-rank R --nproc-per-node 2` in each, and zt_launch_probe ranks that
# reduce across them through rank 0's TCPStore on node 0's veth address. Node 1 can reach node 0
# only over the veth link, so a pass means the launch facts and the rendezvous work across nodes.
#
# usage: two_node_netns.sh ZTRUN PROBE [GLOO_PROBE]
# With GLOO_PROBE (zt_launch_gloo_probe), the two nodes also run the project's gloo Communicator.
# Exits 77 (ctest: skipped) when namespaces cannot be created (not root, no iproute2, no
# CAP_NET_ADMIN). Names carry this shell's pid so parallel runs do not clash; the namespaces (and
# with them the veth pair and any process left inside) are removed on every exit path.
set -euo pipefail
ztrun="$1"
probe="$2"
gloo_probe="${3:-}"
skip() { echo "SKIP: $*"; exit 77; }

[ "$(id -u)" = 0 ] || skip "network namespaces need root"
command -v ip >/dev/null || skip "iproute2 (ip) is not installed"

id=$$
ns0="zt_n0_$id"
ns1="zt_n1_$id"
veth0="ztv0_$id"
veth1="ztv1_$id"
work="$(mktemp -d /tmp/zt_two_node.XXXXXX)"

cleanup() {
  for ns in "$ns0" "$ns1"; do
    if ip netns list | grep -qw "$ns"; then
      for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
      ip netns del "$ns" 2>/dev/null || true
    fi
  done
  ip link del "$veth0" 2>/dev/null || true
  rm -rf "$work" "/etc/netns/$ns0" "/etc/netns/$ns1"
  rmdir /etc/netns 2>/dev/null || true  # only if empty: others' namespaces keep theirs
}
trap cleanup EXIT
trap "exit 143" INT TERM  # runs the EXIT trap too

ip netns add "$ns0" 2>/dev/null || skip "cannot create a network namespace here"
ip netns add "$ns1"
ip link add "$veth0" type veth peer name "$veth1"
ip link set "$veth0" netns "$ns0"
ip link set "$veth1" netns "$ns1"
# Addresses exist only inside the two namespaces: nothing on the host's own network changes.
ip -n "$ns0" addr add 10.231.7.1/24 dev "$veth0"
ip -n "$ns1" addr add 10.231.7.2/24 dev "$veth1"
for ns in "$ns0" "$ns1"; do
  ip -n "$ns" link set lo up
done
# Inside each namespace this host's name resolves to that node's own address, as on a cluster
# (`ip netns exec` mounts /etc/netns/NAME/hosts over /etc/hosts); gloo picks its interface so.
mkdir -p "/etc/netns/$ns0" "/etc/netns/$ns1"
printf '127.0.0.1 localhost\n10.231.7.1 %s\n' "$(hostname)" >"/etc/netns/$ns0/hosts"
printf '127.0.0.1 localhost\n10.231.7.2 %s\n' "$(hostname)" >"/etc/netns/$ns1/hosts"
ip -n "$ns0" link set "$veth0" up
ip -n "$ns1" link set "$veth1" up

mkdir -p "$work/facts"
common=(--nnodes 2 --nproc-per-node 2 --master-addr 10.231.7.1 --master-port 29500
        --log-dir "$work/logs")
timeout -s KILL 90 ip netns exec "$ns0" "$ztrun" "${common[@]}" --node-rank 0 \
  "$probe" --facts-dir "$work/facts" >"$work/node0.out" 2>&1 &
pid0=$!
timeout -s KILL 90 ip netns exec "$ns1" "$ztrun" "${common[@]}" --node-rank 1 \
  "$probe" --facts-dir "$work/facts" >"$work/node1.out" 2>&1 &
pid1=$!
rc0=0; wait "$pid0" || rc0=$?
rc1=0; wait "$pid1" || rc1=$?
echo "--- node 0 (rc $rc0)"; cat "$work/node0.out"
echo "--- node 1 (rc $rc1)"; cat "$work/node1.out"

fail() { echo "FAIL: $*"; exit 1; }
[ "$rc0" = 0 ] && [ "$rc1" = 0 ] || fail "ztrun exit codes $rc0 / $rc1"
for rank in 0 1 2 3; do
  f="$work/facts/rank_$rank.txt"
  [ -f "$f" ] || fail "rank $rank wrote no facts"
  group=$((rank / 2))
  local_rank=$((rank % 2))
  grep -q "^rank=$rank world=4 local_rank=$local_rank local_world=2 group=$group restart=0 " "$f" \
    || fail "rank $rank facts: $(cat "$f")"
  grep -q "\[$rank\] probe rank $rank all-reduce sum 10 ok" "$work/node$group.out" \
    || fail "rank $rank did not finish the reduction on node $group"
  [ -s "$work/logs/rank_$rank.log" ] || fail "no log file for rank $rank"
done
echo "PASS: 4 ranks on 2 namespaces reduced to 10 through 10.231.7.1:29500"

# Direct launch again, with a failure: rank 3 (node 1) exits 6 while node 0's ranks sleep. Node
# 0's ztrun hears of it through the launcher link (master port + 1) and stops its ranks.
run_pair() {  # name, extra args for both nodes...
  local name="$1"
  shift
  rm -rf "$work/facts" && mkdir -p "$work/facts"
  for node in 0 1; do
    ns_var="ns$node"
    timeout -s KILL 90 ip netns exec "${!ns_var}" "$ztrun" --nnodes 2 --nproc-per-node 2 \
      --master-addr 10.231.7.1 --master-port 29510 --node-rank "$node" "$@" \
      >"$work/$name.node$node.out" 2>&1 &
    eval "pid$node=\$!"
  done
  rc0=0; wait "$pid0" || rc0=$?
  rc1=0; wait "$pid1" || rc1=$?
  echo "--- $name: node 0 (rc $rc0)"; cat "$work/$name.node0.out"
  echo "--- $name: node 1 (rc $rc1)"; cat "$work/$name.node1.out"
}
start=$(date +%s)
run_pair fail "$probe" --facts-dir "$work/facts" --fail-rank 3 --fail-code 6 --sleep 60
[ "$rc0" = 1 ] && [ "$rc1" = 1 ] || fail "expected exit codes 1/1, got $rc0/$rc1"
[ $(( $(date +%s) - start )) -lt 30 ] || fail "node 0 was not stopped in time"
grep -q "rank 3 (local rank 1) exited with code 6" "$work/fail.node1.out" || fail "node 1: rank 3"
grep -q "another node failed: rank 3 exited with code 6 on node 1; stopped all 2 local ranks" \
  "$work/fail.node0.out" || fail "node 0 did not name node 1's failure"
echo "PASS: a failure on node 1 stops node 0 (direct launch)"

# Restarts are group-wide across nodes: rank 3 fails in attempt 0 only; both nodes restart and
# every rank finishes with ZT_RESTART_COUNT=1.
run_pair restart --max-restarts 1 "$probe" --facts-dir "$work/facts" --fail-rank 3 \
  --fail-while-restart-below 1
[ "$rc0" = 0 ] && [ "$rc1" = 0 ] || fail "restart: exit codes $rc0/$rc1"
for rank in 0 1 2 3; do
  grep -q " restart=1 " "$work/facts/rank_$rank.txt" || fail "rank $rank: $(cat "$work/facts/rank_$rank.txt")"
done
grep -q "another node failed: rank 3 exited with code 3 on node 1; restarting all ranks" \
  "$work/restart.node0.out" || fail "node 0 did not restart for node 1's failure"
echo "PASS: both nodes restarted together"

if [ -n "$gloo_probe" ]; then
  # The project's gloo Communicator across the two nodes (all_reduce and all_gather).
  run_pair gloo "$gloo_probe" --facts-dir "$work/facts"
  [ "$rc0" = 0 ] && [ "$rc1" = 0 ] || fail "gloo across nodes: exit codes $rc0/$rc1"
  for rank in 0 1 2 3; do
    grep -q "^rank=$rank world=4 local_rank=$((rank % 2)) local_world=2 launcher=torchrun backend=gloo" \
      "$work/facts/rank_$rank.txt" || fail "gloo rank $rank facts"
  done
  echo "PASS: gloo all_reduce and all_gather across the two namespaces"

  # Without the per-namespace hosts file, this host's name resolves as Debian has it (127.0.1.1,
  # loopback): gloo must still bind the interface that routes to the rendezvous address
  # (parallel/route_interface.h), where ProcessGroupGloo's default device binds loopback.
  rm -f "/etc/netns/$ns0/hosts" "/etc/netns/$ns1/hosts"
  run_pair gloo_nohosts "$gloo_probe" --facts-dir "$work/facts"
  [ "$rc0" = 0 ] && [ "$rc1" = 0 ] || fail "gloo without hosts files: exit codes $rc0/$rc1"
  echo "PASS: gloo binds the route to the rendezvous address whatever the hostname resolves to"

  # GLOO_SOCKET_IFNAME is honoured: each node's veth by name works; loopback on both cannot
  # connect across the nodes and must fail (not hang: the probe's communicator times out).
  GLOO_SOCKET_IFNAME="lo" run_pair gloo_ifname_lo "$gloo_probe" --facts-dir "$work/facts" \
    --timeout-s 10
  [ "$rc0" != 0 ] || [ "$rc1" != 0 ] || fail "GLOO_SOCKET_IFNAME=lo across nodes did not fail"
  for node in 0 1; do
    ns_var="ns$node"; veth_var="veth$node"
    timeout -s KILL 90 ip netns exec "${!ns_var}" env GLOO_SOCKET_IFNAME="${!veth_var}" \
      "$ztrun" --nnodes 2 --nproc-per-node 2 --master-addr 10.231.7.1 --master-port 29540 \
      --node-rank "$node" "$gloo_probe" --facts-dir "$work/facts" \
      >"$work/gloo_ifname.node$node.out" 2>&1 &
    eval "pid$node=\$!"
  done
  rc0=0; wait "$pid0" || rc0=$?
  rc1=0; wait "$pid1" || rc1=$?
  [ "$rc0" = 0 ] && [ "$rc1" = 0 ] || {
    cat "$work/gloo_ifname.node0.out" "$work/gloo_ifname.node1.out"
    fail "GLOO_SOCKET_IFNAME=<veth> exit codes $rc0/$rc1"
  }
  echo "PASS: GLOO_SOCKET_IFNAME is honoured (loopback fails across nodes, the veth works)"
fi

# The same two nodes from one hostfile: the hosts are the veth addresses, the master address
# defaults to the first host, and an ssh stand-in runs each node's ztrun in its namespace, in its
# own session as sshd would.
cat >"$work/netns_ssh.sh" <<SSH
#!/bin/sh
case "\$1" in
  10.231.7.1) ns="$ns0" ;;
  10.231.7.2) ns="$ns1" ;;
  *) echo "netns_ssh: unknown host \$1" >&2; exit 255 ;;
esac
# A new session, as sshd gives: signals to this stand-in do not reach the node's ztrun; only the
# EOF of its stdin (forwarded by ssh) does.
exec setsid -w ip netns exec "\$ns" /bin/sh -c "\$2"
SSH
chmod +x "$work/netns_ssh.sh"
printf '10.231.7.1 slots=2\n10.231.7.2 slots=2\n' >"$work/hostfile"
rm -rf "$work/facts" && mkdir -p "$work/facts"
rc=0
# Launched from node 0, as DeepSpeed jobs usually are.
timeout -s KILL 90 ip netns exec "$ns0" "$ztrun" --hostfile "$work/hostfile" \
  --ssh-command "$work/netns_ssh.sh" --master-port 29520 "$probe" --facts-dir "$work/facts" >"$work/hostfile.out" 2>&1 || rc=$?
echo "--- hostfile launch (rc $rc)"; cat "$work/hostfile.out"
[ "$rc" = 0 ] || fail "hostfile launch exit code $rc"
for rank in 0 1 2 3; do
  grep -q "^rank=$rank world=4 local_rank=$((rank % 2)) local_world=2 group=$((rank / 2)) " \
    "$work/facts/rank_$rank.txt" || fail "hostfile launch: rank $rank facts"
done
grep -q "rendezvous 10.231.7.1:29520" "$work/hostfile.out" || fail "master address not node 0's"
echo "PASS: hostfile launch over 2 namespaces"

# A rank on node 1 fails while node 0's ranks sleep: the launching ztrun must name it, and node
# 0's ztrun, which no signal reaches, must stop its ranks: through the launcher link, or else when
# its stdin (the ssh channel) closes.
rm -rf "$work/facts" && mkdir -p "$work/facts"
rc=0
start=$(date +%s)
timeout -s KILL 90 ip netns exec "$ns0" "$ztrun" --hostfile "$work/hostfile" \
  --ssh-command "$work/netns_ssh.sh" --master-port 29530 "$probe" --facts-dir "$work/facts" --fail-rank 3 --fail-code 6 \
  --sleep 60 >"$work/fail.out" 2>&1 || rc=$?
echo "--- hostfile launch with a failing rank (rc $rc)"; cat "$work/fail.out"
[ "$rc" = 1 ] || fail "expected exit code 1, got $rc"
grep -q "rank 3 (local rank 1) exited with code 6" "$work/fail.out" || fail "rank 3 not named"
grep -q "^\[zt E [0-9:.]*\] rank 3 exited with code 6 on node 1 (10.231.7.2); stopped all 2 nodes" \
  "$work/fail.out" || fail "the launching ztrun does not name rank 3 on node 1"
[ $(( $(date +%s) - start )) -lt 30 ] || fail "took too long"
for _ in $(seq 50); do
  [ -z "$(ip netns pids "$ns0")" ] && break
  sleep 0.1
done
[ -z "$(ip netns pids "$ns0")" ] || fail "processes left on node 0: $(ip netns pids "$ns0")"
grep -Eq "\[10.231.7.1\] .*(another node failed|stdin closed)" "$work/fail.out" ||
  fail "node 0 does not say why it stopped"
echo "PASS: a failure on node 1 stops node 0 when signals cannot reach it"
