#!/usr/bin/env python3
"""Storage faults around checkpoints, with the GPT example under ztrun (2 ranks):

disk full   checkpoint.save_dir on a 600 KiB tmpfs that holds one checkpoint (about 390 KB) but
            not two: the save of step 20 fails with a line naming the shard file and the bytes it
            needs; `latest` still names global_step10, no temporary file is left, and the next
            run resumes from it.
corrupt     a flipped byte in the latest tag's shard: the run stops with a line naming that file;
            with checkpoint.load_fallback previous it resumes from the tag before (logged).
partial     the latest tag's metadata.ztm removed: the run stops naming it; --fresh then
            starts from step 1 in the same directory.
Needs root for the tmpfs mount (exit 77 = skipped without it).

usage: gpt_storage_faults.py BIN_DIR WORK_DIR CONFIG
"""
import os
import re
import shutil
import subprocess
import sys

bin_dir, work, config = sys.argv[1:4]
root = os.path.join(work, "storage_faults")
shutil.rmtree(root, ignore_errors=True)
os.makedirs(root)


def train(name, ckpt, steps, *extra, env=None):
    out = os.path.join(root, name)
    cmd = [f"{bin_dir}/ztrun", "--standalone", "--nproc-per-node", "2", f"{bin_dir}/train_gpt",
           "--config", config, "--train-shard", f"{work}/tiny_train.ztt", "--steps", str(steps),
           "--out-dir", out, "--checkpoint-dir", ckpt, "--sample-tokens", "0",
           "--set", "model.n_layer=2", "--set", "model.n_head=2", "--set", "model.d_model=32",
           "--set", "model.vocab_size=0", "--set", "model.max_seq_len=32",
           "--set", "data.max_length=32", "--set", "data.max_tokens=512",
           "--set", "bf16.enabled=false", "--set", "checkpoint.save_interval=10", *extra]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=120, env=dict(os.environ, **(env or {})))
    return p.returncode, p.stdout


def expect(cond, what, log=""):
    if not cond:
        sys.exit(f"FAIL: {what}\n{log[-3000:]}")


def latest(ckpt):
    return open(os.path.join(ckpt, "latest")).read().strip()


def resumed(log):
    return re.findall(r"checkpoint: resumed from (\S+) at step (\d+)(.*)", log)


# ---- disk full ----
mnt = os.path.join(root, "tmpfs")
os.makedirs(mnt)
if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=600k", "tmpfs", mnt]).returncode != 0:
    print("skipped: cannot mount a tmpfs (needs root)")
    sys.exit(77)
try:
    ckpt = os.path.join(mnt, "ckpt")
    rc, log = train("full", ckpt, 20)
    expect(rc != 0, "the save on a full device did not fail", log)
    line = re.search(r".*checkpoint file (\S+global_step20/shard_r\d{5}\.zts(\.tmp)?) "
                     r"(needs at least (\d+) bytes|cannot be written: No space left on device: "
                     r"the file needs (\d+) bytes).*", log)
    expect(line is not None, "no line names the shard file and the bytes it needs", log)
    expect(latest(ckpt) == "global_step10", f"latest is {latest(ckpt)}, not global_step10", log)
    left = [f for f in os.listdir(os.path.join(ckpt, "global_step20")) if f.endswith(".tmp")]
    expect(not left, f"temporary files left behind: {left}")
    print(f"disk full: {line.group(0).strip()}")
    rc, log = train("full_resume", ckpt, 10)
    r = resumed(log)
    expect(rc == 0 and r and r[0][0].endswith("global_step10") and r[0][1] == "10",
           "the previous checkpoint did not load after the failed save", log)
    print(f"disk full: global_step10 stays the latest and loads ({r[0][0]})")
finally:
    subprocess.run(["umount", mnt])

# ---- corrupt latest ----
ckpt = os.path.join(root, "ckpt")
rc, log = train("base", ckpt, 20)
expect(rc == 0 and latest(ckpt) == "global_step20", "the base run did not save step 20", log)
shard = os.path.join(ckpt, "global_step20", "shard_r00001.zts")
with open(shard, "r+b") as f:
    f.seek(os.path.getsize(shard) // 2)
    b = f.read(1)
    f.seek(-1, 1)
    f.write(bytes([b[0] ^ 0xFF]))
rc, log = train("corrupt", ckpt, 30)
expect(rc != 0, "a corrupt latest checkpoint loaded", log)
named = [l for l in log.splitlines() if shard in l and "corrupt" in l and "error" in l]
expect(named, f"no error line names {shard}", log)
print(f"corrupt latest: {named[0].strip()}")
rc, log = train("fallback", ckpt, 30, "--set", "checkpoint.load_fallback=previous")
r = resumed(log)
expect(rc == 0 and r and r[0][0].endswith("global_step10") and r[0][1] == "10"
       and "load_fallback previous: global_step20 was unusable" in r[0][2],
       "load_fallback previous did not resume from global_step10", log)
print(f"load_fallback previous: resumed from {r[0][0]} at step 10{r[0][2]}")

# ---- partial latest ----
expect(latest(ckpt) == "global_step30", "the fallback run did not save step 30", log)
meta = os.path.join(ckpt, "global_step30", "metadata.ztm")
os.remove(meta)
rc, log = train("partial", ckpt, 40)
named = [l for l in log.splitlines() if meta in l and "incomplete" in l]
expect(rc != 0 and named, f"a partial latest checkpoint did not stop the run naming {meta}", log)
print(f"partial latest: {named[0].strip()}")
# --fresh: the same directory, but training starts at step 1 (and saves over the old tags).
rc, log = train("fresh", ckpt, 10, "--fresh")
steps = [int(m) for m in re.findall(r'"step": (\d+)', open(os.path.join(root, "fresh",
                                                                     "metrics.jsonl")).read())]
expect(rc == 0 and not resumed(log) and "starting fresh (--fresh)" in log and steps[0] == 1,
       "--fresh did not start from step 1", log)
expect(latest(ckpt) == "global_step10", "--fresh did not save its own step 10", log)
print("--fresh: started from step 1 beside a partial latest checkpoint")
# In a process the launcher restarted, --fresh is ignored: a restart must resume (torchrun's
# TORCHELASTIC_RESTART_COUNT here; ztrun sets its own ZT_RESTART_COUNT).
rc, log = train("fresh_restarted", ckpt, 10, "--fresh", env={"TORCHELASTIC_RESTART_COUNT": "1"})
r = resumed(log)
expect(rc == 0 and "--fresh is ignored" in log and r and r[0][1] == "10",
       "a restarted process with --fresh did not resume", log)
print("--fresh: ignored after a launcher restart (resumed at step 10)")
print("storage faults: all handled")
