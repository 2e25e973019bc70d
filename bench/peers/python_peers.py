"""Python model peers: one Hugging Face model trained by PyTorch DDP, PyTorch FSDP2, DeepSpeed and
zerotorch's Python front door, on the same batches, 2 ranks on the CPU.

    # once: a DeepSpeed venv next to the project's (torch and transformers shared)
    scripts/setup_deepspeed.sh
    # agreement check (tiny model): every implementation's per-step loss within 1e-4 relative
    # of DDP's
    PY=~/.cache/zerotorch/venv-torch-2.11.0/bin/python
    $PY bench/peers/python_peers.py --check
    # the table (~20M parameters)
    $PY bench/peers/python_peers.py --size 20m --repeats 1

The model is ``transformers.LlamaForCausalLM`` (fp32, SDPA attention, untied embeddings), built
from ``torch.manual_seed(--seed)`` on every rank of every implementation (the checksum of the
initial parameters is in every row and is checked against DDP's). Rank r's batch at step s is
``--micro-batch`` rows of ``--seq`` token ids, row i = start_i + stride_i * t (mod vocab) with
start and stride from a generator seeded with (seed, r, s): learnable, so the loss falls and
optimizer differences show; labels are the inputs (the model shifts them). With
``--vary-seq MIN`` the length changes every step (as dynamic padding makes it): drawn from the
multiples of 8 in [MIN, --seq] by the same generator, so every implementation still gets the same
batches, and tokens/s counts the tokens of the timed steps. AdamW, the same lr / betas / eps / weight decay everywhere,
every parameter decaying, constant learning rate, no clipping. Configurations:

    ddp       torch DistributedDataParallel (gloo), torch.optim.AdamW, torchrun
    fsdp2     torch.distributed.fsdp.fully_shard on every decoder layer and the root, torchrun
    ds1 ds2 ds3   DeepSpeed ZeRO stage 1/2/3 (DS_ACCELERATOR=cpu, gloo; optimizer AdamW with
              torch_adam: torch.optim.AdamW), python -m torch.distributed.run from the
              DeepSpeed venv
    ds2off    DeepSpeed stage 2 + offload_optimizer cpu (DeepSpeedCPUAdam)
    zt1 zt2 zt3 zt2off   zerotorch.initialize with the same config dict, launched with ztrun

Every rank runs with OMP_NUM_THREADS=1 in a session of its own (torchrun's workers are; ztrun's
ranks are started under ``setsid --wait``, see README.md on autogroup scheduling). Results: JSON
lines and a markdown table in --out-dir (default bench/results/python_peers/).

The same file is the rank program (``--rank-mode``), run by each launcher.
"""

import argparse
import datetime
import hashlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CACHE = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "zerotorch")

SIZES = {
    # hidden, layers, heads, intermediate, vocab
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=128, vocab_size=512),
    "20m": dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=6,
                intermediate_size=1536, vocab_size=8000),
    "100m": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=2048, vocab_size=8000),
}

CONFIGS = {
    # name: (implementation, stage, offload)
    "ddp": ("ddp", 0, False),
    "fsdp2": ("fsdp2", 3, False),
    "ds1": ("deepspeed", 1, False),
    "ds2": ("deepspeed", 2, False),
    "ds3": ("deepspeed", 3, False),
    "ds2off": ("deepspeed", 2, True),
    "zt1": ("zerotorch", 1, False),
    "zt2": ("zerotorch", 2, False),
    "zt3": ("zerotorch", 3, False),
    "zt2off": ("zerotorch", 2, True),
}

LABELS = {
    "ddp": "PyTorch DDP", "fsdp2": "PyTorch FSDP2",
    "ds1": "DeepSpeed stage 1", "ds2": "DeepSpeed stage 2", "ds3": "DeepSpeed stage 3",
    "ds2off": "DeepSpeed stage 2 + offload_optimizer cpu",
    "zt1": "zerotorch stage 1", "zt2": "zerotorch stage 2", "zt3": "zerotorch stage 3",
    "zt2off": "zerotorch stage 2 + offload_optimizer cpu",
}

# Everything the runs set, in one place (README.md lists it).
OPTIM = dict(lr=1e-3, betas=[0.9, 0.95], eps=1e-8, weight_decay=0.1)
BUCKET = 5_000_000  # elements (20 MB fp32): reduce/allgather/prefetch buckets; DDP's bucket_cap_mb
PERSISTENCE = 10_000  # stage3_param_persistence_threshold (elements)


def ds_config(stage, offload, micro_batch):
    """The DeepSpeed config dict that DeepSpeed and zerotorch both get."""
    params = dict(OPTIM)
    if not offload:
        # DeepSpeed's AdamW without offload is its FusedAdam op; torch_adam picks
        # torch.optim.AdamW (DDP's and FSDP2's optimizer). zerotorch warns it has no effect.
        params["torch_adam"] = True
    zero = {"stage": stage, "reduce_bucket_size": BUCKET, "allgather_bucket_size": BUCKET,
            "overlap_comm": True, "contiguous_gradients": True}
    if stage == 3:
        zero.update({"stage3_prefetch_bucket_size": BUCKET,
                     "stage3_param_persistence_threshold": PERSISTENCE,
                     "stage3_max_live_parameters": 1_000_000_000,
                     "stage3_max_reuse_distance": 1_000_000_000})
    if offload:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": False}
    return {"train_micro_batch_size_per_gpu": micro_batch, "gradient_accumulation_steps": 1,
            "gradient_clipping": 0.0, "steps_per_print": 1_000_000, "wall_clock_breakdown": False,
            "optimizer": {"type": "AdamW", "params": params}, "zero_optimization": zero}


# ---------------------------------------------------------------------------------------------
# rank mode

def vm_hwm_kb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return -1


def build_model(size, seed, seq):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(**SIZES[size], num_key_value_heads=SIZES[size]["num_attention_heads"],
                      max_position_embeddings=max(seq, 128), tie_word_embeddings=False,
                      use_cache=False, attention_dropout=0.0, torch_dtype="float32")
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).float()
    model.train()
    h = hashlib.sha256()
    total = 0.0
    count = 0
    for name, p in model.named_parameters():
        t = p.detach().contiguous()
        h.update(name.encode())
        h.update(t.numpy().tobytes())
        total += float(t.double().sum())
        count += t.numel()
    return model, cfg, {"sha256": h.hexdigest()[:16], "sum": total, "params": count}


def batch(seed, rank, step, micro_batch, seq, vocab):
    """A learnable synthetic stream (so that the loss moves and optimizer differences show):
    row i is start_i + stride_i * t (mod vocab), start and stride drawn from a generator seeded
    with (seed, rank, step), stride in 1..7."""
    import torch
    g = torch.Generator().manual_seed(seed * 1_000_003 + rank * 10_007 + step)
    start = torch.randint(0, vocab, (micro_batch, 1), generator=g)
    stride = torch.randint(1, 8, (micro_batch, 1), generator=g)
    return (start + stride * torch.arange(seq).unsqueeze(0)) % vocab


def step_seq(a, rank, step):
    """Rank rank's sequence length at step: --seq, or with --vary-seq a multiple of 8 drawn
    from [--vary-seq, --seq] by a generator seeded with (seed, rank, step)."""
    if not a.vary_seq:
        return a.seq
    import torch
    g = torch.Generator().manual_seed(a.seed * 7_919 + rank * 104_729 + step)
    lo, hi = (a.vary_seq + 7) // 8, a.seq // 8
    return 8 * int(torch.randint(lo, hi + 1, (1,), generator=g))


def rank_main(a):
    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    impl, stage, offload = CONFIGS[a.config]
    rss_start = vm_hwm_kb()

    if impl == "zerotorch":
        import zerotorch
        env = zerotorch.launch_env()
        rank, world = env["rank"], env["world_size"]
    elif impl == "deepspeed":
        import deepspeed
        deepspeed.init_distributed(dist_backend="gloo")
        import torch.distributed as dist
        rank, world = dist.get_rank(), dist.get_world_size()
    else:
        import torch.distributed as dist
        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()

    model, cfg, init = build_model(a.size, a.seed, a.seq)
    config = ds_config(stage, offload, a.micro_batch)

    if impl == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(model, bucket_cap_mb=BUCKET * 4 / 2**20)
        opt = torch.optim.AdamW(model.parameters(), **OPTIM)
    elif impl == "fsdp2":
        from torch.distributed.fsdp import fully_shard
        for layer in model.model.layers:
            fully_shard(layer)
        fully_shard(model)
        opt = torch.optim.AdamW(model.parameters(), **OPTIM)
    elif impl == "deepspeed":
        engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                               config=config)
    else:
        engine, _, _, _ = zerotorch.initialize(model=model, model_parameters=model.parameters(),
                                               config=config)
        assert engine.global_rank == rank and engine.world_size == world

    losses, step_s = [], []
    tokens_timed = 0
    t0 = None
    for step in range(a.warmup + a.steps):
        if step == a.warmup:
            t0 = time.perf_counter()
            faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        ts = time.perf_counter()
        seq = step_seq(a, rank, step)
        ids = batch(a.seed, rank, step, a.micro_batch, seq, cfg.vocab_size)
        if step >= a.warmup:  # every rank's tokens (their lengths are known everywhere)
            tokens_timed += a.micro_batch * sum(step_seq(a, r, step) for r in range(world))
        if impl in ("ddp", "fsdp2"):
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        else:
            loss = engine(input_ids=ids, labels=ids).loss
            engine.backward(loss)
            engine.step()
        losses.append(float(loss.item()))
        step_s.append(time.perf_counter() - ts)
    wall = time.perf_counter() - t0 if t0 is not None else 0.0
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0 if t0 is not None else 0

    row = {"config": a.config, "impl": impl, "stage": stage, "offload": offload, "size": a.size,
           "rank": rank, "world": world, "init": init, "losses": losses, "step_s": step_s,
           "timed_wall_s": wall, "tokens_timed": tokens_timed,
           "vm_hwm_kb": vm_hwm_kb(), "vm_hwm_before_import_kb": rss_start,
           "minor_faults_timed": faults,
           "pid": os.getpid(), "sid": os.getsid(0), "omp": os.environ.get("OMP_NUM_THREADS"),
           "torch": torch.__version__}
    if impl == "deepspeed":
        row["deepspeed"] = deepspeed.__version__
        basic = getattr(engine, "basic_optimizer", None)
        row["optimizer_class"] = f"{type(basic).__module__}.{type(basic).__name__}"
        row["zero_optimizer_class"] = type(engine.optimizer).__name__
    elif impl in ("ddp", "fsdp2"):
        row["optimizer_class"] = f"{type(opt).__module__}.{type(opt).__name__}"
    with open(os.path.join(a.rank_out, f"rank{rank}.json"), "w") as f:
        json.dump(row, f)
    if impl in ("ddp", "fsdp2", "deepspeed"):
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


# ---------------------------------------------------------------------------------------------
# driver

def venv_python():
    return os.environ.get("ZT_VENV_PY") or (
        os.path.join(os.environ["ZT_VENV"], "bin", "python") if os.environ.get("ZT_VENV")
        else os.path.join(CACHE, "venv-torch-2.11.0", "bin", "python"))


def ds_venv():
    return os.environ.get("ZT_DS_VENV") or os.path.join(CACHE, "venv-deepspeed")


def job(a, name, rank_out):
    impl = CONFIGS[name][0]
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = "1"
    env.setdefault("ZT_LOG_LEVEL", "warn")
    args = [os.path.abspath(__file__), "--rank-mode", "--config", name, "--size", a.size,
            "--steps", str(a.steps), "--warmup", str(a.warmup), "--seed", str(a.seed),
            "--micro-batch", str(a.micro_batch), "--seq", str(a.seq), "--rank-out", rank_out]
    if a.vary_seq:
        args += ["--vary-seq", str(a.vary_seq)]
    np_ = str(a.nproc)
    if impl in ("ddp", "fsdp2"):
        py = venv_python()
        cmd = [os.path.join(os.path.dirname(py), "torchrun"), "--standalone",
               "--nproc-per-node", np_] + args
    elif impl == "deepspeed":
        v = ds_venv()
        env["DS_ACCELERATOR"] = "cpu"
        env["PATH"] = env.get("PATH", "") + os.pathsep + os.path.join(v, "bin")
        cmd = [os.path.join(v, "bin", "python"), "-m", "torch.distributed.run", "--standalone",
               "--nproc-per-node", np_] + args
    else:
        env["PYTHONPATH"] = os.path.join(ROOT, "build", "python") + (
            os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        cmd = [os.path.join(ROOT, "build", "bin", "ztrun"), "--standalone", "--nproc-per-node",
               np_]
        if shutil.which("setsid"):
            cmd += ["setsid", "--wait"]
        cmd += [venv_python()] + args
    return cmd, env


def run_config(a, name, log_dir, rep):
    rank_out = tempfile.mkdtemp(prefix=f"pp_{name}_")
    cmd, env = job(a, name, rank_out)
    log = os.path.join(log_dir, f"{a.tag or a.size}_{name}_r{rep}.log")
    t = time.time()
    with open(log, "w") as f:
        f.write(" ".join(cmd) + "\n")
        f.flush()
        try:
            p = subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT,
                               timeout=a.timeout, cwd=ROOT)
            rc = p.returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    elapsed = time.time() - t
    ranks = []
    for r in range(a.nproc):
        path = os.path.join(rank_out, f"rank{r}.json")
        if os.path.exists(path):
            with open(path) as f:
                ranks.append(json.load(f))
    shutil.rmtree(rank_out, ignore_errors=True)
    if rc != 0 or len(ranks) != a.nproc:
        with open(log) as f:
            tail = f.read()[-3000:]
        print(f"  {name}: FAILED (rc {rc}, {len(ranks)} rank files, {elapsed:.0f} s), log {log}"
              f"\n{tail}", flush=True)
        return {"config": name, "label": LABELS[name], "size": a.size, "repeat": rep,
                "failed": True, "rc": rc, "log": log, "job_s": elapsed}
    r0 = ranks[0]
    n = len(r0["losses"])
    mean_loss = [sum(r["losses"][i] for r in ranks) / len(ranks) for i in range(n)]
    timed = [max(r["step_s"][i] for r in ranks) for i in range(a.warmup, n)]
    row = {"config": name, "label": LABELS[name], "impl": r0["impl"], "stage": r0["stage"],
           "offload": r0["offload"], "size": a.size, "repeat": rep, "world": r0["world"],
           "params": r0["init"]["params"], "init_sha256": r0["init"]["sha256"],
           "init_sum": r0["init"]["sum"],
           "init_same_on_ranks": all(r["init"] == r0["init"] for r in ranks),
           "micro_batch": a.micro_batch, "seq": a.seq, "warmup": a.warmup, "steps": a.steps,
           "tokens_per_s": r0["tokens_timed"] / r0["timed_wall_s"],
           "timed_wall_s": r0["timed_wall_s"], "step_ms_median": 1e3 * statistics.median(timed),
           "peak_rss_mb_max": max(r["vm_hwm_kb"] for r in ranks) / 1024,
           "peak_rss_mb_ranks": [r["vm_hwm_kb"] / 1024 for r in ranks],
           # Pages the kernel faulted in per timed step (rank 0): memory handed back and taken
           # again every step.
           "minor_faults_per_step": r0["minor_faults_timed"] / max(a.steps, 1),
           "loss_mean": mean_loss, "losses_by_rank": [r["losses"] for r in ranks],
           "sessions_distinct": len({r["sid"] for r in ranks}) == len(ranks),
           "omp_num_threads": [r["omp"] for r in ranks], "torch": r0["torch"],
           "deepspeed": r0.get("deepspeed"), "optimizer_class": r0.get("optimizer_class"),
           "zero_optimizer_class": r0.get("zero_optimizer_class"), "job_s": elapsed, "log": log,
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    print(f"  {name}: {row['tokens_per_s']:.0f} tokens/s, peak RSS {row['peak_rss_mb_max']:.0f} MB,"
          f" {row['minor_faults_per_step']:.0f} page faults/step,"
          f" loss {mean_loss[0]:.6f} -> {mean_loss[-1]:.6f}, init {row['init_sha256']}"
          f" ({elapsed:.0f} s)", flush=True)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rank-mode", action="store_true", help="run one rank (used by launchers)")
    ap.add_argument("--config", help="rank mode: the configuration")
    ap.add_argument("--rank-out", help="rank mode: directory for rank<r>.json")
    ap.add_argument("--configs", default=",".join(CONFIGS),
                    help="comma-separated subset of " + ",".join(CONFIGS) + " (ddp always runs:"
                         " it is the loss reference)")
    ap.add_argument("--size", choices=sorted(SIZES), default="20m")
    ap.add_argument("--steps", type=int, default=10, help="timed steps")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--vary-seq", type=int, default=0, metavar="MIN",
                    help="each step's length a multiple of 8 in [MIN, --seq] (0: always --seq)")
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=900, help="seconds per job")
    ap.add_argument("--check", action="store_true",
                    help="tiny model (unless --size given), assert every loss within --rtol of "
                         "DDP's and the same initial parameters")
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--tag", help="output file name stem (default: [check_]<size>)")
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "bench", "results", "python_peers"))
    a = ap.parse_args()

    if a.rank_mode:
        rank_main(a)
        return
    if a.check and "--size" not in sys.argv:
        a.size = "tiny"
    names = [c for c in a.configs.split(",") if c]
    for c in names:
        if c not in CONFIGS:
            ap.error(f"unknown config {c}")
    if "ddp" not in names:
        names.insert(0, "ddp")
    os.makedirs(a.out_dir, exist_ok=True)
    log_dir = os.path.join(a.out_dir, "logs")
    os.makedirs(log_dir, exist_ok=True)
    tag = a.tag or ("check_" if a.check else "") + a.size
    print(f"python peers: size {a.size}, {a.nproc} ranks, micro-batch {a.micro_batch} x {a.seq}"
          f"{f' (lengths from {a.vary_seq})' if a.vary_seq else ''},"
          f" {a.warmup} + {a.steps} steps, configs {','.join(names)}, repeats {a.repeats}",
          flush=True)

    rows = []
    for rep in range(a.repeats):
        for name in names:
            rows.append(run_config(a, name, log_dir, rep))

    ref = {r["repeat"]: r for r in rows if r["config"] == "ddp" and not r.get("failed")}
    for r in rows:
        d = ref.get(r["repeat"])
        if r.get("failed") or d is None:
            continue
        r["max_abs_loss_diff_vs_ddp"] = max(abs(x - y) for x, y in zip(r["loss_mean"], d["loss_mean"]))
        r["max_rel_loss_diff_vs_ddp"] = max(abs(x - y) / abs(y)
                                            for x, y in zip(r["loss_mean"], d["loss_mean"]))
        r["init_same_as_ddp"] = r["init_sha256"] == d["init_sha256"]

    with open(os.path.join(a.out_dir, f"{tag}.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    table = markdown(rows, names, a)
    with open(os.path.join(a.out_dir, f"{tag}.md"), "w") as f:
        f.write(table)
    print("\n" + table)
    print(f"wrote {os.path.join(a.out_dir, tag)}.jsonl and .md")

    if a.check:
        bad = []
        for r in rows:
            if r.get("failed"):
                bad.append(f"{r['config']}: failed (log {r['log']})")
            elif not (r["init_same_as_ddp"] and r["init_same_on_ranks"]):
                bad.append(f"{r['config']}: initial parameters differ from DDP's")
            elif r["max_rel_loss_diff_vs_ddp"] > a.rtol:
                bad.append(f"{r['config']}: loss differs from DDP's by "
                           f"{r['max_rel_loss_diff_vs_ddp']:.2e} relative (> {a.rtol:g})")
        if bad:
            print("CHECK FAILED:\n  " + "\n  ".join(bad))
            sys.exit(1)
        print(f"CHECK PASSED: {len(rows)} runs, every per-step loss within {a.rtol:g} relative of "
              "DDP's, same initial parameters")


def markdown(rows, names, a):
    ok = [r for r in rows if not r.get("failed")]
    ddp = [r["tokens_per_s"] for r in ok if r["config"] == "ddp"]
    ddp_tps = statistics.median(ddp) if ddp else None
    params = ok[0]["params"] if ok else 0
    out = [f"{a.size}: LlamaForCausalLM {params / 1e6:.1f}M parameters (fp32), {a.nproc} ranks x "
           f"micro-batch {a.micro_batch} x {a.seq} tokens, {a.warmup} warm-up + {a.steps} timed "
           f"steps, {a.repeats} repeat(s)", "",
           "| configuration | tokens/s | vs DDP | step ms (median) | peak RSS / rank (MB) "
           "| page faults / step | max abs loss diff vs DDP |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    for name in names:
        rs = [r for r in rows if r["config"] == name]
        good = [r for r in rs if not r.get("failed")]
        if not good:
            out.append(f"| {LABELS[name]} | failed | | | | | |")
            continue
        tps = statistics.median(r["tokens_per_s"] for r in good)
        all_tps = "/".join(f"{r['tokens_per_s']:.0f}" for r in good)
        out.append(
            f"| {LABELS[name]} | {tps:.0f}" + (f" ({all_tps})" if len(good) > 1 else "") +
            f" | {tps / ddp_tps:.2f}x" + f" | {statistics.median(r['step_ms_median'] for r in good):.0f}"
            f" | {max(r['peak_rss_mb_max'] for r in good):.0f}"
            f" | {statistics.mean(r.get('minor_faults_per_step', float('nan')) for r in good):.0f}"
            f" | {max(r.get('max_abs_loss_diff_vs_ddp', float('nan')) for r in good):.2e} |"
            + ("" if len(good) == len(rs) else f" ({len(rs) - len(good)} failed)"))
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    main()
