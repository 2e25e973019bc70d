#!/usr/bin/env python3
"""Fault injection, end to end.

`ztrun --standalone --nproc-per-node 2 --max-restarts 2` trains the GPT example for 40 steps in
fp32, saving every 10 (checkpoint.save_interval). This script watches metrics.jsonl and the
checkpoint directory and sends SIGKILL to rank 1's process:
  - between:     after step 15 was logged (between the saves of steps 10 and 20);
  - during_save: while rank 1 writes its shard of global_step20 (the save pauses 1 s before the
                 rename, so the kill lands inside it: HOLD_LIB, tests/support/hold_shard_writes.cpp,
                 preloaded into the job).
Each job must finish all 40 steps after ztrun restarts it from the latest complete checkpoint:
every logged loss (those re-run after the resume point included) must equal the uninterrupted
run's bit for bit, and the final parameters (zt-consolidate of global_step40) must be the same
bytes. Prints the recovery time: from the kill to the next completed step.

usage: gpt_fault_injection.py BIN_DIR WORK_DIR CONFIG HOLD_LIB
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

STEPS, INTERVAL = 40, 10

bin_dir, work, config, hold_lib = sys.argv[1:5]
root = os.path.join(work, "fault_injection")
shutil.rmtree(root, ignore_errors=True)
os.makedirs(root)


def command(out):
    return [
        f"{bin_dir}/ztrun", "--standalone", "--nproc-per-node", "2", "--max-restarts", "2",
        f"{bin_dir}/train_gpt", "--config", config,
        "--train-shard", f"{work}/tiny_train.ztt", "--steps", str(STEPS), "--out-dir", out,
        "--checkpoint-dir", f"{out}/ckpt", "--sample-tokens", "0",
        "--set", "model.n_layer=2", "--set", "model.n_head=2", "--set", "model.d_model=32",
        "--set", "model.vocab_size=0", "--set", "model.max_seq_len=32",
        "--set", "model.dropout=0", "--set", "data.max_length=32",
        "--set", "data.max_tokens=512", "--set", "bf16.enabled=false",
        "--set", f"checkpoint.save_interval={INTERVAL}",
        "--set", f"scheduler.params.total_num_steps={STEPS}", "--set", "steps_per_print=10",
    ]


def start(name, extra_env=None):
    out = os.path.join(root, name)
    os.makedirs(out)
    env = dict(os.environ, **(extra_env or {}))
    log = open(os.path.join(out, "ztrun.log"), "w")
    proc = subprocess.Popen(command(out), stdout=log, stderr=subprocess.STDOUT, env=env)
    return proc, out


def finish(proc, out, name):
    rc = proc.wait(timeout=300)
    log = open(os.path.join(out, "ztrun.log")).read()
    if rc != 0:
        sys.exit(f"{name}: ztrun exited {rc}\n{log[-4000:]}")
    return log


def rows(out):
    path = os.path.join(out, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        lines = f.read().split("\n")
    return [json.loads(l) for l in lines[:-1] if l]  # the last piece may be a partial line


def rank_pid(ztrun_pid, rank):
    """The pid of the train_gpt process with RANK=rank below ztrun_pid."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"train_gpt" not in f.read().split(b"\0")[0]:
                    continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(e.split(b"=", 1) for e in f.read().split(b"\0") if b"=" in e)
            if env.get(b"RANK") != str(rank).encode():
                continue
            p = pid
            while p not in ("0", "1"):  # walk up to ztrun
                with open(f"/proc/{p}/stat") as f:
                    p = f.read().rsplit(")", 1)[1].split()[1]
                if p == str(ztrun_pid):
                    return int(pid)
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return None


def wait_for(cond, what, proc, timeout=120):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        v = cond()
        if v:
            return v
        if proc.poll() is not None:
            sys.exit(f"ztrun exited ({proc.returncode}) while waiting for {what}")
        time.sleep(0.005)
    sys.exit(f"timed out waiting for {what}")


def consolidate(out, name):
    st = os.path.join(root, f"{name}.safetensors")
    subprocess.run([f"{bin_dir}/zt-consolidate", f"{out}/ckpt", st, "--tag",
                    f"global_step{STEPS}"], check=True, stdout=subprocess.DEVNULL)
    return st


# The uninterrupted reference.
proc, ref_out = start("reference")
finish(proc, ref_out, "reference")
ref = {r["step"]: r["loss"] for r in rows(ref_out)}
assert sorted(ref) == list(range(1, STEPS + 1)), f"reference steps: {sorted(ref)}"
ref_params = consolidate(ref_out, "reference")


def fault_run(name, trigger, extra_env=None):
    proc, out = start(name, extra_env)
    wait_for(lambda: trigger(out), f"{name}: the moment to kill", proc)
    pid = wait_for(lambda: rank_pid(proc.pid, 1), f"{name}: rank 1's pid", proc)
    logged = len(rows(out))
    killed_at_step = max((r["step"] for r in rows(out)), default=0)
    os.kill(pid, signal.SIGKILL)
    t_kill = time.monotonic()
    # Recovery: the first step completed (logged) by the restarted group.
    wait_for(lambda: any(r["step"] <= killed_at_step for r in rows(out)[logged:]),
             f"{name}: the first step after the restart", proc)
    recovery = time.monotonic() - t_kill
    log = finish(proc, out, name)
    got = rows(out)
    steps = [r["step"] for r in got]
    assert steps[-1] == STEPS and set(steps) == set(range(1, STEPS + 1)), f"{name}: {steps}"
    resumed = re.findall(r"checkpoint: resumed from (\S+) at step (\d+)", log)
    assert len(resumed) == 1, f"{name}: expected one resume, log says {resumed}"
    resume_step = int(resumed[0][1])
    assert "restart 1" in log, f"{name}: ztrun did not restart"
    bad = [(r["step"], r["loss"], ref[r["step"]]) for r in got if r["loss"] != ref[r["step"]]]
    assert not bad, f"{name}: losses differ from the uninterrupted run (step, got, ref): {bad}"
    rerun = steps[logged:]
    assert rerun[0] == resume_step + 1, f"{name}: resumed at {resume_step}, re-ran from {rerun[0]}"
    params = consolidate(out, name)
    assert filecmp.cmp(params, ref_params, shallow=False), \
        f"{name}: final parameters differ from the uninterrupted run"
    print(f"{name}: rank 1 killed after step {killed_at_step}; resumed from {resumed[0][0]} "
          f"(step {resume_step}); 40/40 steps, {len(got) - STEPS} re-run, losses and final "
          f"parameters bit-identical; recovery (kill -> next completed step) {recovery:.2f} s")
    return resume_step


# Between two saves: once step 15 is logged.
r = fault_run("between", lambda out: any(r["step"] >= 15 for r in rows(out)))
assert r == 10, f"between: resumed at step {r}, expected 10"

# During a save: while rank 1's shard of global_step20 is being written.
shard = "ckpt/global_step20/shard_r00001.zts.tmp"  # format.cpp, shard_file_name
r = fault_run("during_save", lambda out: os.path.exists(os.path.join(out, shard)),
              {"LD_PRELOAD": hold_lib, "ZT_TEST_HOLD_SHARD_RENAME_S": "1"})
assert r == 10, f"during_save: resumed at step {r}, expected 10 (global_step20 was incomplete)"
print("fault injection: both kills recovered, results bit-identical")
