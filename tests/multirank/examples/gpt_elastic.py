#!/usr/bin/env python3
"""An elastic job across two network-namespace nodes, end to end.

Two "nodes" (network namespaces joined by a veth pair), each running
`ztrun --nnodes 1:2 --nproc-per-node 2` (node 0's ztrun hosts the rendezvous), train the GPT
example in fp32 for 40 steps at ZeRO-3 with gloo, saving every 4:
  1. both nodes start: round 0 trains at world size 4;
  2. node 1's ztrun is killed (SIGKILL) after step 10: node 0 goes on alone at world size 2 from
     the last complete checkpoint (round 1);
  3. once round 1 has saved a checkpoint of its own, node 1's ztrun starts again: it joins, and
     round 2 trains at world size 4 from round 1's last checkpoint to step 40.
Both ztruns must exit 0, the rounds must run at world sizes 4, 2, 4, and the final parameters
(zt-consolidate of global_step40) must be the same bytes as a reference job that ran the same
world sizes from the same steps without any kill (static launches: two nodes to the first resume
step, node 0 alone to the second, two nodes to the end). The sampler carries its position
across each resize (data/batch_sampler.h), so the reference and the elastic job see the same
batches. Prints the recovery time: from the kill to the first step completed at world size 2.

usage: gpt_elastic.py BIN_DIR WORK_DIR CONFIG [TRAIN_GPT ARGS...]
(the extra arguments go to every train_gpt, after the test's own: `--set model.d_model=256`
measures the recovery at another size).
Exits 77 (skipped) without root or network namespaces.
"""
import filecmp
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

STEPS, INTERVAL, KILL_AFTER = 40, 4, 10
ADDR0, ADDR1, SUBNET = "10.231.9.1", "10.231.9.2", "24"

bin_dir, work, config = sys.argv[1:4]
extra = sys.argv[4:]
root = os.path.join(work, "elastic")
shutil.rmtree(root, ignore_errors=True)
os.makedirs(root)


def skip(why):
    print(f"SKIP: {why}")
    sys.exit(77)


if os.geteuid() != 0:
    skip("network namespaces need root")
if shutil.which("ip") is None:
    skip("iproute2 (ip) is not installed")

tag = str(os.getpid())
ns = [f"zt_e0_{tag}", f"zt_e1_{tag}"]
veth = [f"zte0_{tag}", f"zte1_{tag}"]


def ip(*args, check=True):
    return subprocess.run(["ip", *args], check=check, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode


def cleanup():
    for n in ns:
        pids = subprocess.run(["ip", "netns", "pids", n], capture_output=True, text=True).stdout
        for pid in pids.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        ip("netns", "del", n, check=False)
    ip("link", "del", veth[0], check=False)


if ip("netns", "add", ns[0], check=False) != 0:
    skip("cannot create a network namespace here")
try:
    ip("netns", "add", ns[1])
    ip("link", "add", veth[0], "type", "veth", "peer", "name", veth[1])
    for k, addr in enumerate((ADDR0, ADDR1)):
        ip("link", "set", veth[k], "netns", ns[k])
        ip("-n", ns[k], "addr", "add", f"{addr}/{SUBNET}", "dev", veth[k])
        ip("-n", ns[k], "link", "set", "lo", "up")
        ip("-n", ns[k], "link", "set", veth[k], "up")
except subprocess.CalledProcessError as e:
    cleanup()
    sys.exit(f"FAIL: setting up the namespaces: {e}")

TRAIN = [
    f"{bin_dir}/train_gpt", "--config", config, "--train-shard", f"{work}/tiny_train.ztt",
    "--sample-tokens", "0",
    "--set", "model.n_layer=2", "--set", "model.n_head=2", "--set", "model.d_model=32",
    "--set", "model.vocab_size=0", "--set", "model.max_seq_len=32", "--set", "model.dropout=0",
    "--set", "data.max_length=32", "--set", "data.max_tokens=512", "--set", "bf16.enabled=false",
    "--set", f"checkpoint.save_interval={INTERVAL}", "--set", "checkpoint.keep_last=0",
    "--set", f"scheduler.params.total_num_steps={STEPS}", "--set", "steps_per_print=10",
    "--set", "communication.backend=gloo", "--set", "communication.timeout=60", *extra,
]


def train_args(out, steps):
    return TRAIN + ["--steps", str(steps), "--out-dir", out, "--checkpoint-dir", f"{out}/ckpt"]


def in_ns(k, cmd, log, port):
    """ztrun in node k's namespace; cmd follows ztrun's own flags."""
    return subprocess.Popen(["ip", "netns", "exec", ns[k], f"{bin_dir}/ztrun",
                             "--transport", "native", "--master-addr", ADDR0,
                             "--master-port", str(port), *cmd],
                            stdout=open(log, "w"), stderr=subprocess.STDOUT)


def rows(out):
    path = os.path.join(out, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        lines = f.read().split("\n")
    return [json.loads(l) for l in lines[:-1] if l]  # the last piece may be a partial line


def wait_for(cond, what, procs, timeout=240):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        v = cond()
        if v:
            return v
        for p in procs:
            if p.poll() is not None:
                fail(f"a ztrun exited ({p.returncode}) while waiting for {what}")
        time.sleep(0.01)
    fail(f"timed out waiting for {what}")


logs = []


def fail(why):
    for log in logs:
        if os.path.exists(log):
            print(f"--- {log}\n{open(log).read()[-6000:]}")
    cleanup()
    sys.exit(f"FAIL: {why}")


def finish(proc, log):
    try:
        rc = proc.wait(timeout=300)
    except subprocess.TimeoutExpired:
        proc.kill()
        fail(f"{log} did not finish")
    if rc != 0:
        fail(f"{log}: ztrun exited {rc}")
    return open(log).read()


def consolidate(out, name):
    st = os.path.join(root, f"{name}.safetensors")
    subprocess.run([f"{bin_dir}/zt-consolidate", f"{out}/ckpt", st, "--tag",
                    f"global_step{STEPS}"], check=True, stdout=subprocess.DEVNULL)
    return st


try:
    # ---- the elastic job ------------------------------------------------------------------
    out = os.path.join(root, "elastic")
    elastic = ["--nnodes", "1:2", "--nproc-per-node", "2", "--max-restarts", "3",
               "--rdzv-conf", "last_call_timeout=30,keep_alive_interval=1",
               "--log-dir", f"{out}/logs", *train_args(out, STEPS)]
    os.makedirs(out)
    logs += [f"{root}/node0.log", f"{root}/node1.log", f"{root}/node1_again.log"]
    node0 = in_ns(0, elastic, logs[0], 29580)
    node1 = in_ns(1, elastic, logs[1], 29580)
    wait_for(lambda: any(r["step"] > KILL_AFTER for r in rows(out)), "step 11", [node0, node1])
    logged = len(rows(out))
    killed_at = max(r["step"] for r in rows(out))
    node1.send_signal(signal.SIGKILL)  # `ip netns exec` execs ztrun: this is node 1's ztrun
    node1.wait()
    t_kill = time.monotonic()
    # Recovery: the first step that round 1 completes (a step re-run from the checkpoint).
    wait_for(lambda: any(r["step"] <= killed_at for r in rows(out)[logged:]),
             "the first step at world size 2", [node0])
    recovery = time.monotonic() - t_kill
    # Round 1 saves a checkpoint of its own (a step round 0 never reached), then node 1 is back.
    def latest_step():
        try:
            with open(f"{out}/ckpt/latest") as f:
                return int(re.sub(r"\D", "", f.read()) or 0)
        except FileNotFoundError:
            return 0
    wait_for(lambda: latest_step() >= killed_at + 2, "a checkpoint saved at world size 2", [node0])
    node1 = in_ns(1, elastic, logs[2], 29580)
    log0 = finish(node0, logs[0])
    log1 = finish(node1, logs[2])

    worlds = [int(w) for w in re.findall(r"round \d+: starting ranks \d+\.\.\d+ of (\d+)", log0)]
    if worlds != [4, 2, 4]:
        fail(f"node 0 ran rounds at world sizes {worlds}, expected [4, 2, 4]")
    resumes = re.findall(r"checkpoint: resumed from \S+ at step (\d+) \(loaded in (\d+) ms", log0)
    resumed = [int(step) for step, _ in resumes]
    if len(resumed) != 2 or not resumed[0] < resumed[1]:
        fail(f"expected two resumes at increasing steps, node 0's log says {resumed}")
    if "joined" not in log0 or "lost its ztrun" not in log0:
        fail("node 0's log does not tell the loss and the join of node 1")
    for old, new in ((4, 2), (2, 4)):
        if f"was saved by {old} ranks, this run has {new}: epoch" not in log0:
            fail(f"node 0's log does not tell the sampler's resize from {old} to {new} ranks")
    steps = [r["step"] for r in rows(out)]
    if steps[-1] != STEPS or set(steps) != set(range(1, STEPS + 1)):
        fail(f"steps logged: {steps}")
    elastic_params = consolidate(out, "elastic")

    # ---- the reference: the same world sizes from the same steps, nothing killed ----------
    ref = os.path.join(root, "reference")
    os.makedirs(ref)
    static2 = ["--nnodes", "2", "--nproc-per-node", "2", "--log-dir", f"{ref}/logs"]
    for k, (nodes, until) in enumerate(((2, resumed[0]), (1, resumed[1]), (2, STEPS))):
        logs.append(f"{root}/reference{k}.node0.log")
        if nodes == 2:
            logs.append(f"{root}/reference{k}.node1.log")
            p0 = in_ns(0, static2 + ["--node-rank", "0"] + train_args(ref, until), logs[-2], 29590)
            p1 = in_ns(1, static2 + ["--node-rank", "1"] + train_args(ref, until), logs[-1], 29590)
            finish(p0, logs[-2])
            finish(p1, logs[-1])
        else:
            p0 = in_ns(0, ["--nproc-per-node", "2", *train_args(ref, until)], logs[-1], 29590)
            finish(p0, logs[-1])
    ref_params = consolidate(ref, "reference")
    if not filecmp.cmp(elastic_params, ref_params, shallow=False):
        fail("final parameters differ from the reference with the same world sizes")
    final = {r["step"]: r["loss"] for r in rows(out)}
    ref_final = {r["step"]: r["loss"] for r in rows(ref)}
    bad = [(s, final[s], ref_final.get(s)) for s in range(resumed[1] + 1, STEPS + 1)
           if final[s] != ref_final.get(s)]
    if bad:
        fail(f"the last round's losses differ from the reference (step, got, ref): {bad}")
    print(f"PASS: world sizes 4 -> 2 -> 4 (node 1 killed after step {killed_at}, resumed at "
          f"{resumed[0]}; back at {resumed[1]}); 40/40 steps; final parameters bit-identical to "
          f"the reference; recovery (kill -> first step at world size 2) {recovery:.2f} s, of "
          f"which the checkpoint load {int(resumes[0][1]) / 1000:.2f} s")
finally:
    cleanup()
