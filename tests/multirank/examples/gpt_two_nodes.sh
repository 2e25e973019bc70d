#!/bin/bash
# Training across two nodes: two network namespaces joined by a veth pair, 2 ranks
# each, train the GPT example for 20 steps in fp32, with gloo (one ztrun per node) and with MPI
# (mpirun from node 0, an ssh stand-in entering node 1's namespace, OpenMPI told the subnet to
# use). Each run's per-step losses must equal a 4-rank single-node run of the same backend within
# 1e-6 relative. No per-namespace hosts file: this machine's name resolves as it does here
# (Debian: loopback), so gloo must bind the interface that routes to the rendezvous address.
#
# usage: gpt_two_nodes.sh BIN_DIR WORK_DIR PYTHON CONFIG MPIEXEC
# Exits 77 (skipped) without root or network namespaces.
set -euo pipefail
bin="$1"; work="$2"; python="$3"; config="$4"; mpiexec="$5"
skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "network namespaces need root"
command -v ip >/dev/null || skip "iproute2 (ip) is not installed"

id=$$
ns0="zt_g0_$id"; ns1="zt_g1_$id"; veth0="ztg0_$id"; veth1="ztg1_$id"
out="$work/two_nodes"
rm -rf "$out"; mkdir -p "$out"
cleanup() {
  for ns in "$ns0" "$ns1"; do
    if ip netns list | grep -qw "$ns"; then
      for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
      ip netns del "$ns" 2>/dev/null || true
    fi
  done
  ip link del "$veth0" 2>/dev/null || true
}
trap cleanup EXIT
trap "exit 143" INT TERM
ip netns add "$ns0" 2>/dev/null || skip "cannot create a network namespace here"
ip netns add "$ns1"
ip link add "$veth0" type veth peer name "$veth1"
ip link set "$veth0" netns "$ns0"
ip link set "$veth1" netns "$ns1"
ip -n "$ns0" addr add 10.231.8.1/24 dev "$veth0"
ip -n "$ns1" addr add 10.231.8.2/24 dev "$veth1"
for ns in "$ns0" "$ns1"; do ip -n "$ns" link set lo up; done
ip -n "$ns0" link set "$veth0" up
ip -n "$ns1" link set "$veth1" up

train=("$bin/train_gpt" --config "$config" --train-shard "$work/tiny_train.ztt" --steps 20
       --sample-tokens 0 --set model.n_layer=2 --set model.n_head=2 --set model.d_model=32
       --set model.vocab_size=0 --set model.max_seq_len=32 --set model.dropout=0
       --set data.max_length=32 --set data.max_tokens=256 --set bf16.enabled=false
       --set scheduler.params.total_num_steps=20 --set communication.timeout=60)
mpi=("$mpiexec" --allow-run-as-root --oversubscribe --mca btl tcp,self
     --mca btl_tcp_if_include 10.231.8.0/24 --mca oob_tcp_if_include 10.231.8.0/24)

compare() {  # name reference
  "$python" - "$out/$1/metrics.jsonl" "$out/$2/metrics.jsonl" "$1" <<'PY'
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(p)] for p in sys.argv[1:3])
assert len(a) == len(b) == 20, (len(a), len(b))
worst = max(abs(x - y) / abs(y) for x, y in zip(a, b))
assert worst <= 1e-6, f"{sys.argv[3]}: losses differ from one node by up to {worst:.2e} relative"
print(f"{sys.argv[3]}: 20 losses equal the 4-rank single-node run within {worst:.1e} relative")
PY
}

# References: 4 ranks on this machine.
timeout -s KILL 180 "$bin/ztrun" --standalone --nproc-per-node 4 "${train[@]}" \
  --out-dir "$out/gloo_one_node" --checkpoint-dir "$out/gloo_one_node/ckpt" --set communication.backend=gloo >"$out/gloo_one_node.log" 2>&1 ||
  { tail -20 "$out/gloo_one_node.log"; exit 1; }
timeout -s KILL 180 "$mpiexec" --allow-run-as-root --oversubscribe -np 4 "${train[@]}" \
  --out-dir "$out/mpi_one_node" --checkpoint-dir "$out/mpi_one_node/ckpt" --set communication.backend=mpi >"$out/mpi_one_node.log" 2>&1 ||
  { tail -20 "$out/mpi_one_node.log"; exit 1; }

# gloo: one ztrun per node.
for node in 0 1; do
  ns_var="ns$node"
  timeout -s KILL 180 ip netns exec "${!ns_var}" "$bin/ztrun" --nnodes 2 --node-rank "$node" \
    --nproc-per-node 2 --master-addr 10.231.8.1 --master-port 29560 "${train[@]}" \
    --out-dir "$out/gloo_two_nodes" --checkpoint-dir "$out/gloo_two_nodes/ckpt" --set communication.backend=gloo \
    >"$out/gloo_two_nodes.node$node.log" 2>&1 &
  eval "pid$node=\$!"
done
rc0=0; wait "$pid0" || rc0=$?
rc1=0; wait "$pid1" || rc1=$?
[ "$rc0" = 0 ] && [ "$rc1" = 0 ] || {
  tail -20 "$out/gloo_two_nodes.node0.log" "$out/gloo_two_nodes.node1.log"
  echo "FAIL: gloo across two nodes: exit codes $rc0/$rc1"; exit 1
}
compare gloo_two_nodes gloo_one_node

# MPI: mpirun on node 0 starts node 1's ranks through an ssh stand-in.
cat >"$out/netns_ssh.sh" <<SSH
#!/bin/sh
# OpenMPI's rsh launcher: netns_ssh.sh [options] HOST COMMAND...
while [ \$# -gt 0 ]; do case "\$1" in -*) shift ;; *) break ;; esac; done
host="\$1"; shift
case "\$host" in
  10.231.8.1) ns="$ns0" ;;
  10.231.8.2) ns="$ns1" ;;
  *) echo "netns_ssh: unknown host \$host" >&2; exit 255 ;;
esac
exec ip netns exec "\$ns" /bin/sh -c "\$*"
SSH
chmod +x "$out/netns_ssh.sh"
rc=0
timeout -s KILL 180 ip netns exec "$ns0" "${mpi[@]}" --mca plm_rsh_agent "$out/netns_ssh.sh" \
  -np 4 --host 10.231.8.1:2,10.231.8.2:2 -x PATH -x LD_LIBRARY_PATH "${train[@]}" \
  --out-dir "$out/mpi_two_nodes" --checkpoint-dir "$out/mpi_two_nodes/ckpt" --set communication.backend=mpi >"$out/mpi_two_nodes.log" 2>&1 ||
  rc=$?
[ "$rc" = 0 ] || { tail -30 "$out/mpi_two_nodes.log"; echo "FAIL: mpi across two nodes: rc $rc"; exit 1; }
compare mpi_two_nodes mpi_one_node
echo "PASS: the GPT example trains across two nodes with gloo and MPI as on one node"
