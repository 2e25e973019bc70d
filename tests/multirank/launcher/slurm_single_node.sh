#!/bin/bash
# `srun -n 4` of zt_launch_probe on a private single-node Slurm cluster (munged, slurmctld and
# slurmd started here, in a temporary directory, on free ports) must discover the same ranks as
# `ztrun --nproc-per-node 4`: rank, world size, local rank and local world size of every rank.
#
# usage: slurm_single_node.sh ZTRUN PROBE [ABORT_PROBE]  (with ABORT_PROBE: the abort cases, srun)
# Exits 77 (ctest: skipped) without root or without Debian's slurmd/slurmctld/slurm-client/munge.
# The daemons are stopped (by their pid files) and the directory removed on every exit path.
set -euo pipefail
ztrun="$1"
probe="$2"
abort_probe="${3:-}"
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }

[ "$(id -u)" = 0 ] || skip "a private Slurm cluster needs root here"
for tool in srun sinfo slurmd slurmctld munged python3; do
  command -v "$tool" >/dev/null || [ -x "/usr/sbin/$tool" ] ||
    skip "$tool not installed (apt-get install slurmd slurmctld slurm-client munge)"
done

work="$(mktemp -d /tmp/zt_slurm.XXXXXX)"
cleanup() {
  for f in "$work/slurmd.pid" "$work/slurmctld.pid" "$work/munge/pid"; do
    [ -s "$f" ] && kill "$(cat "$f")" 2>/dev/null || true
  done
  for f in "$work/slurmd.pid" "$work/slurmctld.pid" "$work/munge/pid"; do
    [ -s "$f" ] || continue
    pid="$(cat "$f")"
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT
trap "exit 143" INT TERM  # runs the EXIT trap too

free_ports() {  # N free TCP ports
  python3 -c "
import socket
ss = [socket.socket() for _ in range($1)]
for s in ss: s.bind(('', 0))
print(' '.join(str(s.getsockname()[1]) for s in ss))"
}
read -r ctld_port slurmd_port store_port < <(free_ports 3)
host="$(hostname -s)"

mkdir -p "$work/state" "$work/spool" "$work/munge" "$work/ztrun" "$work/srun"
chmod 700 "$work/munge"
dd if=/dev/urandom of="$work/munge/key" bs=1024 count=1 2>/dev/null
chmod 400 "$work/munge/key"
/usr/sbin/munged --socket="$work/munge/sock" --key-file="$work/munge/key" \
  --pid-file="$work/munge/pid" --log-file="$work/munge/log" --seed-file="$work/munge/seed" -f

cat >"$work/slurm.conf" <<CONF
ClusterName=zt$$
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
AuthInfo=socket=$work/munge/sock
CredType=cred/munge
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
NodeName=$host CPUs=4 State=UNKNOWN
PartitionName=zt Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
export SLURM_CONF="$work/slurm.conf"
/usr/sbin/slurmctld -f "$SLURM_CONF"
/usr/sbin/slurmd -f "$SLURM_CONF"
for _ in $(seq 100); do
  state="$(sinfo -h -o %t 2>/dev/null || true)"
  [ "$state" = idle ] && break
  sleep 0.2
done
[ "$state" = idle ] || { tail -5 "$work"/*.log; fail "slurm node not idle: '$state'"; }

timeout -s KILL 90 "$ztrun" --standalone --nproc-per-node 4 "$probe" \
  --facts-dir "$work/ztrun" >"$work/ztrun.out" 2>&1 || { cat "$work/ztrun.out"; fail "ztrun"; }
timeout -s KILL 90 srun -n 4 "$probe" --facts-dir "$work/srun" --master-addr 127.0.0.1 \
  --master-port "$store_port" >"$work/srun.out" 2>&1 || { cat "$work/srun.out"; fail "srun"; }
cat "$work/srun.out"
grep -q "source=slurm" "$work/srun.out" || fail "the probe did not see Slurm's variables"
for rank in 0 1 2 3; do
  z="$(cut -d' ' -f1-4 "$work/ztrun/rank_$rank.txt")"
  s="$(cut -d' ' -f1-4 "$work/srun/rank_$rank.txt")"
  [ "$z" = "$s" ] || fail "rank $rank: ztrun '$z' vs srun '$s'"
  echo "rank $rank: $s (same under ztrun and srun)"
done
echo "PASS: srun -n 4 and ztrun --nproc-per-node 4 give the same ranks"

# Fast collective abort under srun (tests/multirank/core/abort/): a rank killed or raising inside
# a save, an all-gather or an all-reduce; the other stops within 5 s, rank 1 named.
if [ -n "$abort_probe" ]; then
  MASTER_ADDR=127.0.0.1 MASTER_PORT="$store_port" ZT_ABORT_LAUNCHERS=srun \
    bash "$(dirname "$0")/../core/abort/abort_test.sh" "$ztrun" "$abort_probe" "$work/abort" none ||
    fail "abort under srun"
fi
