"""The memory plan (core/plan/memory_plan.h) against measurement, and the refusal it drives.

  gpt_memory_plan.py measured BIN_DIR WORK_DIR   plan vs measured peaks, within 10%
  gpt_memory_plan.py refusal  BIN_DIR WORK_DIR   a run that cannot fit is refused fast

train_gpt (--measure-memory) writes its plan and the measured peaks of the largest rank into
summary.json. On the host-backed test device (testdevice/) the device peak is its allocator's
high-water mark and pinned bytes its pinned allocator's; NVMe bytes are the swap files' sizes; on
the CPU the host peak is the most CPU tensor bytes alive at once (train/cpu_memory_meter.h, with
LibTorch's own allocator: ZT_HOST_CACHE=0) plus the NVMe swap buffers, host memory that is not a
tensor. Every sample is max_length tokens (the corpus' lines joined), so every micro-batch has the
shape the plan assumes.

The configurations cover stages 0-3, offload none / cpu / nvme, fp32 and bf16 (with fp32 masters,
and DeepSpeed's bf16 masters and optimizer states), one and two ranks,
gradient accumulation, activation checkpointing on and off, DeepSpeed's defaults and Hugging
Face's "auto" values. The ones marked held out were not run while the plan was built; they were
checked once it was written (a miss found there, the reduced slice of a window's later
micro-steps, is named in the plan).
"""
import json
import os
import subprocess
import sys
import time

TOL = 0.10
MODEL = {"n_layer": 4, "n_head": 4, "d_model": 256, "vocab_size": 0, "max_seq_len": 64,
         "dropout": 0}


def config(zero, bf16=True, ckpt=False, micro=4, extra=None):
    c = {"train_micro_batch_size_per_gpu": micro, "gradient_accumulation_steps": 1,
         "bf16": {"enabled": bf16}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
         "zero_optimization": zero, "model": dict(MODEL, activation_checkpointing=ckpt),
         "data": {"max_length": 64}}
    c.update(extra or {})
    return c


def corpus(bin_dir, work):
    here = os.path.dirname(os.path.abspath(__file__))
    text, joined, shard = (os.path.join(work, n) for n in ("tiny.txt", "long.txt", "long.ztt"))
    subprocess.run(["bash", os.path.join(here, "gpt_tiny_corpus.sh"), text], check=True)
    lines = open(text).read().split("\n")
    with open(joined, "w") as f:  # 20 lines a sample: every sample longer than max_length
        for i in range(0, len(lines) - 19, 20):
            f.write(" ".join(lines[i:i + 20]) + "\n")
    subprocess.run([f"{bin_dir}/zt-pretokenize", "--input", joined, "--model-type", "bpe",
                    "--vocab-size", "128", "--train-model", os.path.join(work, "long.model"),
                    "--add-eos", "--output", shard], check=True, capture_output=True)
    return shard


def train(bin_dir, work, shard, name, cfg, device, world, extra_args=(), check=True,
          program="train_gpt"):
    out = os.path.join(work, name)
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "config.json")
    json.dump(cfg, open(path, "w"))
    cmd = [f"{bin_dir}/{program}", "--config", path, "--train-shard", shard, "--steps", "3",
           "--out-dir", os.path.join(out, "run"), "--device", device, "--measure-memory",
           *(["--sample-tokens", "0"] if program == "train_gpt" else []), *extra_args]
    if world > 1:
        cmd = [f"{bin_dir}/ztrun", "--standalone", "--nproc-per-node", str(world)] + cmd
    env = dict(os.environ, ZT_HOST_CACHE="0")
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=out)
    if check and r.returncode != 0:
        sys.exit(f"{name}: {program} failed ({r.returncode}):\n{r.stdout[-3000:]}{r.stderr[-3000:]}")
    return r, os.path.join(out, "run", "summary.json")


def measured(bin_dir, work):
    shard = corpus(bin_dir, work)
    nvme = os.path.join(work, "nvme")
    os.makedirs(nvme, exist_ok=True)
    on_nvme = {"offload_optimizer": {"device": "nvme", "nvme_path": nvme},
               "offload_param": {"device": "nvme", "nvme_path": nvme, "max_in_cpu": 0}}
    auto = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
            "train_batch_size": "auto", "gradient_clipping": "auto",
            "bf16": {"enabled": "auto"},
            "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto"}},
            "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto",
                                  "stage3_prefetch_bucket_size": "auto",
                                  "stage3_param_persistence_threshold": "auto"},
            "model": MODEL, "data": {"max_length": 64}}
    cpu_off = {"offload_optimizer": {"device": "cpu"}}
    # DeepSpeed's bf16 masters, with and without bf16 optimizer states.
    bf16_master = {"bf16": {"enabled": True, "bf16_master_weights_and_grads": True}}
    bf16_states = {"bf16": dict(bf16_master["bf16"], bf16_optimizer_states=True)}
    one_inflight = {"communication": {"max_inflight_reductions": 1}}
    # (name, config, device, world, held out)
    runs = [
        ("s0", config({"stage": 0}), "zttest", 1, False),
        ("s1", config({"stage": 1}), "zttest", 1, False),
        ("s2", config({"stage": 2}), "zttest", 1, False),
        ("s3_hf_auto", auto, "zttest", 1, False),
        ("s3_fp32", config({"stage": 3}, bf16=False), "zttest", 1, False),
        ("s3_ckpt_micro16", config({"stage": 3}, ckpt=True, micro=16), "zttest", 1, False),
        ("s2_offload_cpu", config(dict({"stage": 2}, **cpu_off)), "zttest", 1, False),
        ("s3_offload_nvme", config(dict({"stage": 3}, **on_nvme)), "zttest", 1, False),
        ("s3_2ranks", config({"stage": 3}), "zttest", 2, False),
        ("s2_ckpt_accum2_2ranks",
         config({"stage": 2}, ckpt=True, extra={"gradient_accumulation_steps": 2}), "zttest", 2,
         True),
        ("s1_fp32_offload_cpu_2ranks", config(dict({"stage": 1}, **cpu_off), bf16=False),
         "zttest", 2, True),
        ("s3_offload_cpu_ckpt_micro8_2ranks",
         config(dict({"stage": 3}, offload_param={"device": "cpu"}, **cpu_off), ckpt=True,
                micro=8), "zttest", 2, True),
        ("s0_fp32_ckpt", config({"stage": 0}, bf16=False, ckpt=True), "zttest", 1, True),
        ("cpu_s2", config({"stage": 2}), "cpu", 1, False),
        ("cpu_s3_micro16_2ranks", config({"stage": 3}, micro=16), "cpu", 2, False),
        ("cpu_s3_nvme_2ranks", config(dict({"stage": 3}, **on_nvme)), "cpu", 2, True),
        ("s2_bf16_master_states", config({"stage": 2}, extra=bf16_states), "zttest", 1, False),
        ("s3_bf16_master_states_offload_nvme",
         config(dict({"stage": 3}, **on_nvme), extra=bf16_states), "zttest", 1, False),
        ("cpu_s2_bf16_master_offload_cpu_2ranks",
         config(dict({"stage": 2}, **cpu_off), extra=bf16_master), "cpu", 2, False),
        # One reduction in flight: on the CPU with the optimizer on NVMe only that one reduced
        # gradient slice is in memory, the others wait in the chunk files.
        ("cpu_s3_nvme_bf16_states_inflight1_2ranks",
         config(dict({"stage": 3}, **on_nvme), extra=dict(bf16_states, **one_inflight)), "cpu",
         2, False),
    ]
    check_plans(runs, lambda name, cfg, device, world: train(bin_dir, work, shard, name, cfg,
                                                             device, world))


def check_plans(runs, run):
    """Runs each (name, config, device, world, held out) and compares its plan with its measured
    peaks; exits naming every place off by more than TOL."""
    worst, failures = (0.0, ""), []
    print(f"{'configuration':36s} {'place':7s} {'measured':>10s} {'plan':>10s}  error")
    for name, cfg, device, world, held_out in runs:
        _, path = run(name, cfg, device, world)
        s = json.load(open(path))
        pairs = []
        if device == "cpu":
            pairs.append(("host", s["peak_host_tensor_bytes"] + s["nvme_buffer_bytes_max"],
                          s["plan_host_bytes"]))
        else:
            pairs.append(("device", s["peak_device_bytes"], s["plan_device_bytes"]))
            if s["plan_pinned_bytes"] > 0 or s["peak_pinned_bytes"] > 0:
                pairs.append(("pinned", s["peak_pinned_bytes"], s["plan_pinned_bytes"]))
        if s["plan_nvme_bytes"] > 0 or s["nvme_bytes_max"] > 0:
            pairs.append(("nvme", s["nvme_bytes_max"], s["plan_nvme_bytes"]))
        for place, meas, plan in pairs:
            err = (plan - meas) / meas
            label = name + (" (held out)" if held_out else "")
            print(f"{label:36s} {place:7s} {meas / 2**20:8.2f}Mi {plan / 2**20:8.2f}Mi  {err:+.1%}")
            if abs(err) > abs(worst[0]):
                worst = (err, f"{label} {place}")
            if abs(err) > TOL:
                failures.append(f"{label} {place}: plan {plan} B, measured {meas} B ({err:+.1%})")
    print(f"worst: {worst[0]:+.1%} ({worst[1]}), {len(runs)} configurations")
    if failures:
        sys.exit("plan off by more than 10%:\n  " + "\n  ".join(failures))


def refusal(bin_dir, work):
    shard = corpus(bin_dir, work)
    cfg = config({"stage": 3})
    # Nothing fits 30 MiB on the device, not even with every state offloaded; 60 MiB fits once
    # the optimizer is offloaded (the plan of that run is about 34 MiB, of this one 76 MiB).
    start = time.monotonic()
    r, _ = train(bin_dir, work, shard, "refused", cfg, "zttest", 1,
                 ["--set", "memory_plan.device_limit_gib=0.06"], check=False)
    took = time.monotonic() - start
    err = r.stderr + r.stdout
    line = next((l for l in err.splitlines() if "memory plan: device needs" in l), "")
    assert r.returncode != 0, f"not refused:\n{err[-2000:]}"
    assert line, f"no refusal line:\n{err[-2000:]}"
    assert "largest part: optimizer state" in line, line
    assert "fits with: zero_optimization.offload_optimizer.device: cpu" in line, line
    assert "trained" not in err, "the refused run trained"
    assert took < 5, f"refusal took {took:.1f} s"
    print(f"refused in {took:.2f} s: {line}")
    r, _ = train(bin_dir, work, shard, "nothing_fits", cfg, "zttest", 1,
                 ["--set", "memory_plan.device_limit_gib=0.03"], check=False)
    assert r.returncode != 0 and "no change tried fits" in r.stderr + r.stdout, r.stderr[-2000:]
    # The fitting change named above does fit, and start_anyway starts the refused run.
    train(bin_dir, work, shard, "fits", config({"stage": 3, "offload_optimizer": {"device": "cpu"}}),
          "zttest", 1, ["--set", "memory_plan.device_limit_gib=0.06"])
    r, _ = train(bin_dir, work, shard, "anyway", cfg, "zttest", 1,
                 ["--set", "memory_plan.device_limit_gib=0.06",
                  "--set", "memory_plan.start_anyway=true"])
    assert "memory plan: device needs" in r.stderr + r.stdout
    print("the fitting change trains; start_anyway starts the refused run")


if __name__ == "__main__":
    mode, bin_dir, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    {"measured": measured, "refusal": refusal}[mode](bin_dir, work)
