"""bench/capacity: the largest GPT each setup trains on this machine, 2 ranks.

    python bench/capacity/run_capacity.py [--build-dir build] [--out bench/results/capacity]
        [--layers "ddp=8,12,16;zt stage 3=16,24,32;..."] [--compare-layers 24]
    python bench/capacity/run_capacity.py --small     # CI: a tiny GPT, seconds

For each configuration the GPT (models/gpt; d_model and heads fixed, layers grown) is trained
for --steps optimizer steps at each layer count of its list, in ascending order, until one does
not complete; the largest that completed is the configuration's capacity. A run is "killed for
memory" when the summed resident memory of its processes passes --mem-limit-gib (default: what the
machine has available at the start, less 1 GiB, so the kernel's OOM killer never has to choose),
or when the kernel kills a rank. Configurations:

    ddp                          PyTorch DDP, fp32, fused AdamW (capacity_torch.py)
    fsdp2                        PyTorch FSDP2, meta-device init, bf16 compute, fused AdamW
    zt stage 3                   train_gpt under ztrun: ZeRO-3, bf16, fp32 master and Adam state
    zt stage 3 + nvme opt        the same, offload_optimizer.device nvme (master + Adam on disk)
    zt stage 3 + nvme opt+param  and offload_param.device nvme, max_in_cpu 0 (16-bit shards too)
    zt stage 3 + nvme opt+param + bf16 states
                                 and DeepSpeed's bf16 master, gradient and Adam moments

Every run processes the same tokens per step: --batch sequences of --seq tokens per rank (the
zerotorch side pads every batch to --seq; its figure counts padded tokens, what was computed).
Per run: tokens/s over the steps after the first, peak RSS per rank (the largest of the two
ranks), bytes on disk under the NVMe path (peak), model-state bytes per rank. Writes
<out>/capacity.jsonl (every run), <out>/summary.json (--json: the same as one object) and
<out>/capacity.md (the tables), and prints the tables.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "bench", "peers"))
from run_peers import child_env, make_shard, torchrun_cmd  # noqa: E402

CONFIGS = ["ddp", "fsdp2", "zt stage 3", "zt stage 3 + nvme opt", "zt stage 3 + nvme opt+param",
           "zt stage 3 + nvme opt+param + bf16 states"]
ZT_SETS = {
    "zt stage 3": [],
    "zt stage 3 + nvme opt": ["zero_optimization.offload_optimizer.device=nvme"],
    "zt stage 3 + nvme opt+param": ["zero_optimization.offload_optimizer.device=nvme",
                                    "zero_optimization.offload_param.device=nvme",
                                    "zero_optimization.offload_param.max_in_cpu=0"],
}
# DeepSpeed's bf16 masters, gradients and Adam moments (16 bits each instead of 32).
ZT_SETS["zt stage 3 + nvme opt+param + bf16 states"] = ZT_SETS["zt stage 3 + nvme opt+param"] + [
    "bf16.bf16_master_weights_and_grads=true", "bf16.bf16_optimizer_states=true",
    "data_types.grad_accum_dtype=bf16"]


def log(*a):
    print(*a, flush=True)


# ---- watching a job ------------------------------------------------------------------------

def proc_tree(root_pid):
    """{pid: (rss_bytes, cmdline)} of root_pid and its descendants."""
    children, info = {}, {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            ppid, rss_pages = int(fields[1]), int(fields[21])
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(d))
        info[int(d)] = (rss_pages * os.sysconf("SC_PAGE_SIZE"), cmd)
    out, todo = {}, [root_pid]
    while todo:
        p = todo.pop()
        if p in info:
            out[p] = info[p]
        todo.extend(children.get(p, []))
    return out


def disk_bytes(path):
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            try:
                total += os.stat(os.path.join(dirpath, f)).st_blocks * 512
            except OSError:
                pass
    return total


def mem_available():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise SystemExit("no MemAvailable in /proc/meminfo")


def watch(cmd, env, limit, nvme_dir, timeout, is_rank, log_path):
    """Runs cmd in a session of its own; returns (status, peak rank RSS, peak total RSS, peak
    disk bytes, seconds). status: ok, killed for memory, failed (rc), timeout."""
    t0 = time.time()
    with open(log_path, "w") as out:
        p = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                             start_new_session=True)
        peak_rank = peak_total = peak_disk = 0
        status = None
        while p.poll() is None:
            tree = proc_tree(p.pid)
            total = sum(r for r, _ in tree.values())
            peak_total = max(peak_total, total)
            peak_rank = max([peak_rank] + [r for r, c in tree.values() if is_rank(c)])
            if nvme_dir and os.path.isdir(nvme_dir):
                peak_disk = max(peak_disk, disk_bytes(nvme_dir))
            if total > limit:
                status = "killed for memory"
            elif time.time() - t0 > timeout:
                status = "timeout"
            if status:
                for pid in tree:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
                break
            time.sleep(0.2)
        rc = p.wait()
    if status is None:
        # The kernel's OOM killer (SIGKILL to a rank) reads as memory too.
        with open(log_path, errors="replace") as f:
            text = f.read()
        if rc == 0:
            status = "ok"
        elif rc == -9 or "signal 9" in text or "Killed" in text:
            status = "killed for memory"
        else:
            status = f"failed (exit {rc})"
    return status, peak_rank, peak_total, peak_disk, time.time() - t0


# ---- one run -------------------------------------------------------------------------------

def zt_config_file(out, a, shard_vocab):
    path = os.path.join(out, "capacity_zt.yaml")
    with open(path, "w") as f:
        f.write(f"""# bench/capacity's zerotorch config (written by run_capacity.py)
train_micro_batch_size_per_gpu: {a.batch}
gradient_accumulation_steps: 1
gradient_clipping: 1.0
steps_per_print: 1
seed: 1234
bf16: {{enabled: true}}
data_types: {{grad_accum_dtype: fp32}}
optimizer: {{type: AdamW, params: {{lr: 1.0e-4, weight_decay: 0.0}}}}
zero_optimization:
  stage: 3
  reduce_bucket_size: {a.bucket}
  stage3_prefetch_bucket_size: {a.bucket}
  stage3_param_persistence_threshold: 0
  stage3_max_reuse_distance: 0  # every layer released after its forward: no memory spent on reuse
  sub_group_size: {a.bucket}
  offload_optimizer: {{nvme_path: {a.nvme_path}, buffer_count: 4, pipeline_read: true, pipeline_write: true}}
  offload_param: {{nvme_path: {a.nvme_path}, buffer_count: 5, buffer_size: {a.bucket}}}
communication: {{backend: auto, timeout: 1800}}
data: {{max_length: {a.seq}, max_tokens: 0, bucketing: false, pad_to_multiple: {a.seq}, shuffle: true}}
model: {{n_layer: 1, n_head: {a.n_head}, d_model: {a.d_model}, vocab_size: {shard_vocab},
        max_seq_len: {a.seq}, dropout: 0.0, activation_checkpointing: false}}
""")
    return path


def run_one(name, layers, a, shard, vocab, cfg_file, out):
    tag = name.replace(" ", "_").replace("+", "p")
    run_dir = os.path.join(out, "runs", f"{tag}_L{layers}")
    shutil.rmtree(run_dir, ignore_errors=True)
    os.makedirs(run_dir)
    shutil.rmtree(a.nvme_path, ignore_errors=True)
    os.makedirs(a.nvme_path)
    env = child_env()
    env["ZT_LOG_LEVEL"] = "info"
    if name in ZT_SETS:
        cmd = [os.path.join(a.bin_dir, "ztrun"), "--standalone", "--nproc-per-node", "2",
               os.path.join(a.bin_dir, "train_gpt"), "--config", cfg_file, "--train-shard", shard,
               "--steps", str(a.steps), "--sample-tokens", "0", "--fresh", "--out-dir", run_dir,
               "--set", f"model.n_layer={layers}"]
        for s in ZT_SETS[name]:
            cmd += ["--set", s]
        is_rank = lambda c: "train_gpt" in c and "ztrun" not in c and "mpirun" not in c
    else:
        cmd = torchrun_cmd(2) + [os.path.join(HERE, "capacity_torch.py"), "--mode", name,
                                 "--n-layer", str(layers), "--d-model", str(a.d_model),
                                 "--n-head", str(a.n_head), "--vocab", str(vocab), "--seq",
                                 str(a.seq), "--batch", str(a.batch), "--steps", str(a.steps),
                                 "--json", os.path.join(run_dir, "summary.json")]
        is_rank = lambda c: "capacity_torch.py" in c and "torchrun" not in c
    status, rank_rss, total_rss, disk, secs = watch(
        cmd, env, a.mem_limit, a.nvme_path, a.timeout, is_rank, os.path.join(run_dir, "log.txt"))
    row = dict(config=name, n_layer=layers, status=status, peak_rss_rank=rank_rss,
               peak_rss_total=total_rss, disk_bytes=disk, seconds=round(secs, 1))
    if status == "ok":
        if name in ZT_SETS:
            with open(os.path.join(run_dir, "summary.json")) as f:
                s = json.load(f)
            steps = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
            timed = steps[1:] or steps
            secs_sum = sum(x["step_seconds"] for x in timed)
            row.update(parameters=s["parameters"],
                       tokens_per_s=sum(x["padded_tokens"] for x in timed) / secs_sum,
                       step_seconds=secs_sum / len(timed),
                       model_state_bytes_per_rank=s["model_state_bytes_per_rank"],
                       plan_host_bytes=s["plan_host_bytes"], plan_nvme_bytes=s["plan_nvme_bytes"])
        else:
            with open(os.path.join(run_dir, "summary.json")) as f:
                s = json.load(f)
            row.update(parameters=s["parameters"], tokens_per_s=s["tokens_per_s"],
                       step_seconds=sum(s["step_seconds"]) / len(s["step_seconds"]),
                       model_state_bytes_per_rank=s["model_state_bytes_per_rank"])
    shutil.rmtree(a.nvme_path, ignore_errors=True)
    log(f"[capacity] {name:28s} L={layers:3d}: {status}"
        + (f", {count(row['parameters'])} params, {row['tokens_per_s']:.1f} tok/s"
           if status == "ok" else "")
        + f", peak RSS/rank {rank_rss / 2**30:.2f} GiB, disk {disk / 2**30:.2f} GiB, {secs:.0f} s")
    with open(os.path.join(out, "capacity.jsonl"), "a") as f:
        f.write(json.dumps(row) + "\n")
    return row


# ---- tables --------------------------------------------------------------------------------

def gib(b):
    return f"{b / 2**30:.2f}"


def count(n):
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.0f}M" if n >= 1e6 else f"{n / 1e3:.0f}K"


def tables(rows, a, load):
    best = {}
    for r in rows:
        if r["status"] == "ok" and r["config"] in a.configs and r["n_layer"] != a.compare_layers_only:
            if r["config"] not in best or r["n_layer"] > best[r["config"]]["n_layer"]:
                best[r["config"]] = r
    first_fail = {}
    for r in rows:
        if r["status"] != "ok":
            first_fail.setdefault(r["config"], r)
    ddp = best.get("ddp")
    lines = [f"GPT d_model {a.d_model}, {a.n_head} heads, {a.batch} x {a.seq} tokens per rank per "
             f"step, {a.steps} steps, 2 ranks; memory limit {gib(a.mem_limit)} GiB summed over "
             f"the job's processes; load average {load}",
             "",
             "| config | largest that trained | parameters | vs DDP | tokens/s | peak RSS/rank GiB "
             "| plan host/rank GiB | disk GiB | plan disk GiB | disk B/param | next size |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for c in a.configs:
        r, f = best.get(c), first_fail.get(c)
        nxt = f"L={f['n_layer']}: {f['status']}" if f else "not tried"
        if not r:
            lines.append(f"| {c} | none | - | - | - | - | - | - | - | - | {nxt} |")
            continue
        ratio = f"{r['parameters'] / ddp['parameters']:.2f}x" if ddp else "-"
        # The plan counts tensors (and swap buffers) per rank; RSS adds the program's own memory.
        plan_host = gib(r["plan_host_bytes"]) if "plan_host_bytes" in r else "-"
        plan_disk = gib(2 * r["plan_nvme_bytes"]) if "plan_nvme_bytes" in r else "-"
        lines.append(f"| {c} | {r['n_layer']} layers | {count(r['parameters'])} | {ratio} | "
                     f"{r['tokens_per_s']:.1f} | {gib(r['peak_rss_rank'])} | {plan_host} | "
                     f"{gib(r['disk_bytes'])} | {plan_disk} | "
                     f"{r['disk_bytes'] / r['parameters']:.1f} | {nxt} |")
    if a.compare_layers:
        same = [r for r in rows if r["n_layer"] == a.compare_layers and r["status"] == "ok"
                and r["config"] in ZT_SETS]
        if same:
            base = next((r for r in same if r["config"] == "zt stage 3"), None)
            lines += ["", f"Step time at {a.compare_layers} layers "
                          f"({count(same[0]['parameters'])} parameters):", "",
                      "| config | s/step | vs stage 3 in memory | tokens/s | peak RSS/rank GiB | "
                      "disk GiB |", "| --- | --- | --- | --- | --- | --- |"]
            for r in same:
                rel = f"{r['step_seconds'] / base['step_seconds']:.2f}x" if base else "-"
                lines.append(f"| {r['config']} | {r['step_seconds']:.2f} | {rel} | "
                             f"{r['tokens_per_s']:.1f} | {gib(r['peak_rss_rank'])} | "
                             f"{gib(r['disk_bytes'])} |")
    return "\n".join(lines), best


def parse_layers(text, default):
    out = {c: list(default) for c in CONFIGS}
    for part in filter(None, (text or "").split(";")):
        name, _, values = part.partition("=")
        name = name.strip()
        if name not in out:
            raise SystemExit(f"--layers: unknown config {name!r} (known: {', '.join(CONFIGS)})")
        out[name] = [int(v) for v in values.split(",") if v.strip()]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--out", default=None, help="default bench/results/capacity[-small]")
    ap.add_argument("--small", action="store_true", help="CI: tiny GPT, 1 and 2 layers")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--layers", default=None,
                    help='per config, e.g. "ddp=8,12;zt stage 3=16,24" (others: --default-layers)')
    ap.add_argument("--default-layers", default="4,8,16,24,32,48,64,96")
    ap.add_argument("--compare-layers", type=int, default=0,
                    help="also run every zerotorch config at this size; step times side by side")
    ap.add_argument("--d-model", type=int, default=1536)
    ap.add_argument("--n-head", type=int, default=16)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--bucket", type=int, default=60_000_000,
                    help="reduce_bucket_size, prefetch, sub_group_size and offload_param's "
                         "buffer_size (elements)")
    ap.add_argument("--nvme-path", default=None, help="default <out>/nvme")
    ap.add_argument("--mem-limit-gib", type=float, default=None)
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per run")
    ap.add_argument("--json", default=None, help="also write the summary here")
    a = ap.parse_args()
    if a.small:
        a.d_model, a.n_head, a.seq, a.batch, a.steps, a.bucket = 64, 2, 32, 2, 3, 20000
        a.default_layers = "1,2"
        a.timeout = min(a.timeout, 300)
    a.out = os.path.abspath(a.out or os.path.join(
        ROOT, "bench", "results", "capacity-small" if a.small else "capacity"))
    a.bin_dir = os.path.join(a.build_dir, "bin")
    a.nvme_path = os.path.abspath(a.nvme_path or os.path.join(a.out, "nvme"))
    a.configs = [c.strip() for c in a.configs.split(",") if c.strip()]
    for c in a.configs:
        if c not in CONFIGS:
            raise SystemExit(f"--configs: unknown config {c!r} (known: {', '.join(CONFIGS)})")
    a.mem_limit = int(a.mem_limit_gib * 2**30) if a.mem_limit_gib else mem_available() - 2**30
    a.compare_layers_only = None
    layers = parse_layers(a.layers, [int(v) for v in a.default_layers.split(",")])
    os.makedirs(a.out, exist_ok=True)
    open(os.path.join(a.out, "capacity.jsonl"), "w").close()
    shard = make_shard(os.path.join(a.out, "data"), a.bin_dir, real_text=False)
    vocab = 128  # make_shard's synthetic corpus: a BPE vocabulary of 128
    cfg = zt_config_file(a.out, a, vocab)
    load = os.getloadavg()[0]
    rows = []
    for c in a.configs:
        for n in sorted(layers[c]):
            r = run_one(c, n, a, shard, vocab, cfg, a.out)
            rows.append(r)
            if r["status"] != "ok":
                break
    if a.compare_layers:
        for c in a.configs:
            if c in ZT_SETS and not any(r["config"] == c and r["n_layer"] == a.compare_layers
                                        for r in rows):
                rows.append(run_one(c, a.compare_layers, a, shard, vocab, cfg, a.out))
    load = f"{load:.2f} at the start, {os.getloadavg()[0]:.2f} at the end"
    text, best = tables(rows, a, load)
    with open(os.path.join(a.out, "capacity.md"), "w") as f:
        f.write(text + "\n")
    summary = dict(rows=rows, largest={c: r["parameters"] for c, r in best.items()},
                   d_model=a.d_model, n_head=a.n_head, seq=a.seq, batch=a.batch, steps=a.steps,
                   mem_limit_bytes=a.mem_limit, load=load)
    for path in filter(None, [os.path.join(a.out, "summary.json"), a.json]):
        with open(path, "w") as f:
            json.dump(summary, f, indent=1)
    log(text)
    if a.small:
        # CI: every configuration trained, and the watchdog stops a run above its limit.
        missing = [c for c in a.configs if c not in best]
        if missing:
            raise SystemExit(f"[capacity] no size trained for: {', '.join(missing)}")
        a.mem_limit = 64 * 2**20
        r = run_one("zt stage 3", 1, a, shard, vocab, cfg, os.path.join(a.out, "watchdog"))
        if r["status"] != "killed for memory":
            raise SystemExit(f"[capacity] a run above a 64 MiB limit ended {r['status']!r}, not "
                             "'killed for memory'")
        log("[capacity] watchdog: a run above a 64 MiB limit was killed for memory, as it must")


if __name__ == "__main__":
    main()
