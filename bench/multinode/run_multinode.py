"""bench/multinode: ZeRO-3 and hybrid sharding on a shaped two-node cluster (see README.md).

    sudo ~/.cache/zerotorch/venv-torch-2.11.0/bin/python bench/multinode/run_multinode.py
    ... run_multinode.py --check      # the CI-sized version (ctest: bench.multinode_check)

Two network namespaces joined by a veth pair stand for two nodes; the veth's egress on both
sides goes through tc's token-bucket filter (tbf) at --rates (this kernel has tbf, not netem, so
the link is slow but adds no delay). Two ranks per node (ranks 0-1 on node 0, 2-3 on node 1), one
ztrun (zerotorch) or torchrun (PyTorch) per node, gloo. Each configuration trains the GPT example
on the batches bench/peers exports (the same initial weights and batches for every row) and
reports tokens/s, the bytes that crossed the link per step (both veth ends' tx_bytes, read around
the timed steps by each node's local rank 0), peak RSS, model-state bytes per rank and the loss.

--check (tiny model, few steps) also asserts what the formulas in README.md predict for each
row's bytes over the link (hybrid sharding, hpZ, qwZ, qgZ and ZeRO++ against plain stage 3; the
hierarchical stage-2 reduction against the flat one) and the losses each row keeps.
"""

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "peers"))
import run_peers  # noqa: E402  (bench/peers/run_peers.py: shard, export, sizes)

NODES, PER_NODE = 2, 2
SUBNET = "10.231.9"

# name -> (implementation, arguments); ENV: what a row sets in its ranks' environment. Stage-3
# rows release each layer after its forward (stage3_max_reuse_distance 0), so its backward gathers
# it again as in a model too large to keep gathered: at DeepSpeed's default distance this small
# model would keep every layer for its backward, and the backward's gathers that README's
# formulas count would not happen.
S3 = ["--stage", "3", "--stage3-max-reuse-distance", "0"]
CONFIGS = {
    "zt stage 3": ("zt", list(S3)),
    "zt stage 3 mics 2": ("zt", S3 + ["--mics-shard-size", "2"]),
    "zt stage 3 mics 4 hierarchical": ("zt", S3 + ["--mics-shard-size", "4",
                                                   "--mics-hierarchical-gather"]),
    "zt stage 3 hpz 2": ("zt", S3 + ["--hpz-partition-size", "2"]),
    "zt stage 3 qwz": ("zt", S3 + ["--quantized-weights"]),
    "zt stage 3 hpz 2 qwz": ("zt", S3 + ["--hpz-partition-size", "2", "--quantized-weights"]),
    "zt stage 3 qgz": ("zt", S3 + ["--quantized-gradients"]),
    "zt stage 3 hpz 2 qwz qgz": ("zt", S3 + ["--hpz-partition-size", "2", "--quantized-weights",
                                             "--quantized-gradients"]),
    "zt stage 2 flat": ("zt", ["--stage", "2"]),
    "zt stage 2 hierarchical": ("zt", ["--stage", "2"]),
    "fsdp2": ("torch", ["--mode", "fsdp2"]),
    "fsdp2 hsdp 2": ("torch", ["--mode", "hsdp", "--shard-size", "2"]),
}
# Stages 0-2 reduce in the node, then across nodes, by default over gloo (ZT_HIERARCHICAL_REDUCE,
# core/zero/hierarchical_reduce.h); the flat row turns that off.
ENV = {"zt stage 2 flat": {"ZT_HIERARCHICAL_REDUCE": "0"},
       "zt stage 2 hierarchical": {"ZT_HIERARCHICAL_REDUCE": "1"}}


def sh(*cmd, check=True):
    return subprocess.run(cmd, check=check, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True).stdout


@contextlib.contextmanager
def cluster(rate):
    """Two namespaces, a veth pair between them, tbf at `rate` on both ends."""
    tag = str(os.getpid())
    ns = [f"ztmn{i}_{tag}" for i in range(NODES)]
    veth = [f"ztmn{i}_{tag}"[:15] for i in range(NODES)]
    try:
        for n in ns:
            sh("ip", "netns", "add", n)
        sh("ip", "link", "add", veth[0], "type", "veth", "peer", "name", veth[1])
        for i in range(NODES):
            sh("ip", "link", "set", veth[i], "netns", ns[i])
            sh("ip", "-n", ns[i], "addr", "add", f"{SUBNET}.{i + 1}/24", "dev", veth[i])
            sh("ip", "-n", ns[i], "link", "set", "lo", "up")
            sh("ip", "-n", ns[i], "link", "set", veth[i], "up")
            if rate != "unlimited":
                # burst: enough for the rate at a 1 ms timer; latency bounds the queue.
                sh("ip", "netns", "exec", ns[i], "tc", "qdisc", "add", "dev", veth[i], "root",
                   "tbf", "rate", rate, "burst", "256kb", "latency", "100ms")
        yield ns, veth
    finally:
        for n in ns:
            for pid in sh("ip", "netns", "pids", n, check=False).split():
                subprocess.run(["kill", "-9", pid], stderr=subprocess.DEVNULL)
            sh("ip", "netns", "del", n, check=False)


def node_command(impl, node, port, bin_dir, export_dir, args, common, veth):
    counter = f"/sys/class/net/{veth}/statistics/tx_bytes"
    if impl == "zt":
        launch = [os.path.join(bin_dir, "ztrun"), "--nnodes", str(NODES), "--node-rank",
                  str(node), "--nproc-per-node", str(PER_NODE), "--master-addr", f"{SUBNET}.1",
                  "--master-port", str(port)]
        return launch + [os.path.join(bin_dir, "zt_bench_peers"), "--run", export_dir,
                         "--backend", "gloo", "--link-counter", counter, *args, *common]
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    launch = [torchrun, "--nnodes", str(NODES), "--node-rank", str(node), "--nproc-per-node",
              str(PER_NODE), "--master-addr", f"{SUBNET}.1", "--master-port", str(port)]
    return launch + [os.path.join(HERE, "..", "peers", "peers_torch.py"), "--export-dir",
                     export_dir, "--link-counter", counter, *args, *common]


def run_row(name, ns, veth, port, bin_dir, export_dir, size, json_path, timeout):
    impl, args = CONFIGS[name]
    common = ["--warmup", str(size["warmup"]), "--label", name, "--json", json_path]
    procs = []
    for node in range(NODES):
        env = run_peers.child_env()
        env["GLOO_SOCKET_IFNAME"] = veth[node]
        env.update(ENV.get(name, {}))
        cmd = ["ip", "netns", "exec", ns[node]] + node_command(
            impl, node, port, bin_dir, export_dir, args, common, veth[node])
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=timeout)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise SystemExit(f"{name}: no result within {timeout} s")
    if any(p.returncode for p in procs):
        for o in outs:
            sys.stderr.write(o[-4000:])
        raise SystemExit(f"{name}: failed ({[p.returncode for p in procs]})")
    line = [l for l in outs[0].splitlines() if l.startswith(name)]
    run_peers.log(line[-1] if line else outs[0].strip().splitlines()[-1])


def table(rows, size, rates):
    out = [f"GPT example, {size['params_m']:.2f}M parameters, {NODES} nodes x {PER_NODE} ranks, "
           f"fp32, gloo; median of the timed steps, bytes over the link per step (both "
           f"directions)", "",
           "| link | configuration | tokens/s | MB over the link / step | peak RSS MiB | "
           "model states MiB / rank | last loss |",
           "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for rate in rates:
        for r in rows:
            if r["rate"] != rate:
                continue
            out.append(f"| {rate} | {r['config']} | {r['tokens_per_s']:.0f} | "
                       f"{r['link_bytes_per_step'] / 1e6:.2f} | {r['peak_rss_bytes'] / 2**20:.0f} "
                       f"| {r['model_state_bytes'] / 2**20:.2f} | {r['losses'][-1]:.5f} |")
    return "\n".join(out)


def check(rows):
    """The CI assertions (README.md, "Formulas")."""
    by = {r["config"]: r for r in rows}
    plain = by["zt stage 3"]
    # qwZ: the all-gathers move a quarter of their fp32 bytes (int8, plus a scale per block).
    for name, formula, loss_rtol in (("zt stage 3 mics 2", 1 / 3, 1e-5),
                                     ("zt stage 3 hpz 2", 3 / 4, 1e-5),
                                     ("zt stage 3 mics 4 hierarchical", 20 / 24, 1e-5),
                                     ("zt stage 3 qwz", 15 / 24, 2e-2),
                                     ("zt stage 3 hpz 2 qwz", 13.5 / 24, 2e-2),
                                     ("zt stage 3 qgz", 13 / 24, 2e-2)):
        row = by[name]
        ratio = row["link_bytes_per_step"] / plain["link_bytes_per_step"]
        run_peers.log(f"check: {name} / plain stage 3 link bytes per step = {ratio:.3f} "
                      f"(formula: {formula:.3f})")
        assert abs(ratio - formula) <= 0.1 * formula, \
            f"{name}: link bytes ratio {ratio:.3f}, formula {formula:.3f} (10% allowed)"
        worst = max(abs(a - b) / abs(b) for a, b in zip(row["losses"], plain["losses"]))
        assert worst <= loss_rtol, \
            f"{name}: losses differ from plain stage 3 by {worst:.2e} relative ({loss_rtol})"
        run_peers.log(f"check: {name} losses equal plain stage 3's within {worst:.1e} relative")
    # Stage 2 in two levels: the reduce-scatter puts 8 Ψ on the link instead of gloo's 12 Ψ and
    # the publish all-gather 4 Ψ instead of 6 Ψ (README.md, Formulas): 12 / 18 of the flat row's
    # bytes, and the flat row's losses up to the order of the sums.
    flat, hier = by["zt stage 2 flat"], by["zt stage 2 hierarchical"]
    ratio = hier["link_bytes_per_step"] / flat["link_bytes_per_step"]
    formula = 12 / 18
    run_peers.log(f"check: zt stage 2 hierarchical / flat link bytes per step = {ratio:.3f} "
                  f"(formula: {formula:.3f})")
    assert abs(ratio - formula) <= 0.1 * formula, \
        f"stage 2 hierarchical: link bytes ratio {ratio:.3f}, formula {formula:.3f} (10% allowed)"
    worst = max(abs(a - b) / abs(b) for a, b in zip(hier["losses"], flat["losses"]))
    assert worst <= 1e-5, f"stage 2 hierarchical: losses differ from flat by {worst:.2e}"
    run_peers.log(f"check: zt stage 2 hierarchical losses equal flat's within {worst:.1e} relative")
    # All of ZeRO++ together: the paper's target, a quarter of plain stage 3's bytes or less (the
    # formula, 2.5 Ψ of 24, leaves out the root unit's backward gather and the scales; README).
    row = by["zt stage 3 hpz 2 qwz qgz"]
    ratio = row["link_bytes_per_step"] / plain["link_bytes_per_step"]
    run_peers.log(f"check: zt stage 3 hpz 2 qwz qgz / plain stage 3 link bytes per step = "
                  f"{ratio:.3f} (target: <= 0.25)")
    assert ratio <= 0.25, f"hpZ + qwZ + qgZ: link bytes ratio {ratio:.3f} > 0.25"
    worst = max(abs(a - b) / abs(b) for a, b in zip(row["losses"], plain["losses"]))
    assert worst <= 2e-2, f"hpZ + qwZ + qgZ: losses differ from plain stage 3 by {worst:.2e}"
    run_peers.log(f"check: zt stage 3 hpz 2 qwz qgz losses within {worst:.1e} relative")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", default=os.path.join(run_peers.ROOT, "build"))
    ap.add_argument("--out", default=os.path.join(run_peers.ROOT, "bench/results/multinode"))
    ap.add_argument("--rates", default="1gbit,200mbit", help="tbf rates, comma-separated")
    ap.add_argument("--size", choices=sorted(run_peers.SIZES), default=None)
    ap.add_argument("--steps", type=int, default=0, help="batches per rank (0: the size's)")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--check", action="store_true", help="tiny, one rate, with assertions")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("SKIP: network namespaces need root")
        sys.exit(77)
    bin_dir = os.path.join(os.path.abspath(a.build_dir), "bin")
    size = dict(run_peers.SIZES[a.size or ("tiny" if a.check else "small")])
    if a.steps:
        size["steps"] = a.steps
    if a.check:
        size["steps"], size["warmup"] = 8, 2
    rates = ["200mbit"] if a.check else a.rates.split(",")
    configs = (["zt stage 3", "zt stage 3 mics 2", "zt stage 3 mics 4 hierarchical",
                "zt stage 3 hpz 2", "zt stage 3 qwz",
                "zt stage 3 hpz 2 qwz", "zt stage 3 qgz", "zt stage 3 hpz 2 qwz qgz",
                "zt stage 2 flat", "zt stage 2 hierarchical"]
               if a.check else
               [c.strip() for c in a.configs.split(",")])
    os.makedirs(a.out, exist_ok=True)
    work = os.path.join(a.out, "work")
    shard = run_peers.make_shard(work, bin_dir, real_text=not a.check)
    export_dir = os.path.join(work, "export")
    run_peers.export(bin_dir, shard, export_dir, size, NODES * PER_NODE, seed=1234)
    with open(os.path.join(export_dir, "meta.json")) as f:
        size["params_m"] = json.load(f).get("parameters", 0) / 1e6
    json_path = os.path.join(a.out, "runs.jsonl")
    if os.path.exists(json_path):
        os.remove(json_path)
    rows, port = [], 29700
    t0 = time.time()
    for rate in rates:
        with cluster(rate) as (ns, veth):
            for name in configs:
                port += 1
                before = len(run_peers.read_rows(json_path)) if os.path.exists(json_path) else 0
                run_row(name, ns, veth, port, bin_dir, export_dir, size, json_path,
                        timeout=1800)
                new = run_peers.read_rows(json_path)[before:]
                for r in new:
                    r["rate"] = rate
                rows += new
    with open(json_path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    text = table(rows, size, rates)
    with open(os.path.join(a.out, "summary.md"), "w") as f:
        f.write(text + "\n")
    run_peers.log(text)
    run_peers.log(f"done in {time.time() - t0:.0f} s")
    if a.check:
        check(rows)


if __name__ == "__main__":
    main()
