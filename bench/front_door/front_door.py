"""The Python front door's overhead: the GPT example (examples/gpt) trained by train_gpt (C++)
against its Python twin (tests/unit/python/gpt_twin.py: the same modules, names and math)
trained through ``zerotorch.initialize`` from Python, same config, same shard, same sampler
settings, 2 ranks under ztrun, interleaved repeats. Reports the median step time and tokens/s of
the timed steps of each, and the overhead of Python.

    $PY bench/front_door/front_door.py [--build-dir build] [--steps 30] [--warmup 5]
        [--repeats 2] [--stage 3] [--out bench/results/front_door]

Without --rank it drives; with --rank it is one rank of the Python side (ztrun starts it).
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

CONFIG = """
train_micro_batch_size_per_gpu: {micro}
gradient_accumulation_steps: 1
steps_per_print: 1000
seed: 1234
optimizer: {{type: AdamW, params: {{lr: 1.0e-3, weight_decay: 0.01}}}}
zero_optimization: {{stage: {stage}, reduce_bucket_size: auto, stage3_prefetch_bucket_size: auto,
                    stage3_param_persistence_threshold: 0}}
data: {{max_length: {seq}, bucketing: true, shuffle: true, mega_batch_mult: 50, pad_to_multiple: 1}}
model: {{n_layer: {layers}, n_head: {heads}, d_model: {d}, vocab_size: 0, max_seq_len: {seq},
        dropout: 0.0}}
"""


def rank_main(a):
    """One rank of the Python side: the twin, the engine, the sampler as the config says."""
    import torch
    sys.path.insert(0, os.path.join(ROOT, "tests", "unit", "python"))
    import zerotorch
    from gpt_twin import Gpt
    from zerotorch.data import Collator, LengthBucketedSampler, TokenShardDataset
    data = TokenShardDataset(a.shard)
    torch.manual_seed(1234)
    model = Gpt(data.vocab_size, a.d_model, a.layers, a.heads, a.seq)
    # "auto" bucket sizes from d_model, as train_gpt resolves them from model.d_model.
    engine, _, _, _ = zerotorch.initialize(model=model, config=a.config,
                                           auto={"hidden_size": a.d_model})
    sampler = LengthBucketedSampler(data, batch_size=a.micro, seed=1234, mega_batch_mult=50,
                                    max_length=a.seq, rank=engine.global_rank,
                                    world_size=engine.world_size)
    collate = Collator(pad_id=data.pad_id, max_length=a.seq, causal_lm_shift=True)
    loader = iter(torch.utils.data.DataLoader(data, batch_sampler=sampler, collate_fn=collate))
    rows = []
    for step in range(1, a.steps + 1):
        start = time.perf_counter()
        b = next(loader)
        loss = engine(b["input_ids"], b["attention_mask"], b["labels"])
        engine.backward(loss)
        engine.step()
        seconds = time.perf_counter() - start
        tokens = int(b["attention_mask"].sum())
        rows.append({"step": step, "loss": loss.item(), "step_seconds": seconds,
                     "tokens": tokens})
    if engine.global_rank == 0:
        with open(a.metrics, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")


def summarize(rows, warmup, world):
    timed = [r for r in rows if r["step"] > warmup]
    step = statistics.median(r["step_seconds"] for r in timed)
    tokens = sum(r["tokens"] for r in timed) * world / sum(r["step_seconds"] for r in timed)
    return step, tokens


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "front_door"))
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--stage", type=int, default=3)
    p.add_argument("--micro", type=int, default=8)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--rank", action="store_true")
    p.add_argument("--config")
    p.add_argument("--shard")
    p.add_argument("--metrics")
    a = p.parse_args()
    if a.rank:
        return rank_main(a)

    os.makedirs(a.out, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=os.path.join(a.build_dir, "python"), OMP_NUM_THREADS="1")
    sys.path.insert(0, env["PYTHONPATH"])
    from zerotorch.data import write_token_shard
    rng = random.Random(0)
    shard = os.path.join(a.out, "tokens.ztt")
    write_token_shard(shard, [[rng.randrange(1, 2000) for _ in range(rng.randrange(32, a.seq))]
                              for _ in range(4000)], vocab_size=2000, meta={"pad_id": "0"})
    config = os.path.join(a.out, "gpt.yaml")
    with open(config, "w") as f:
        f.write(CONFIG.format(micro=a.micro, stage=a.stage, seq=a.seq, layers=a.layers,
                              heads=a.heads, d=a.d_model))
    ztrun = [os.path.join(a.build_dir, "bin", "ztrun"), "--standalone", "--nproc-per-node", "2"]
    results = {"cpp": [], "python": []}
    for rep in range(a.repeats):
        out = os.path.join(a.out, f"cpp{rep}")
        subprocess.run(ztrun + [os.path.join(a.build_dir, "bin", "train_gpt"), "--config", config,
                                "--train-shard", shard, "--steps", str(a.steps), "--out-dir", out,
                                "--sample-tokens", "0", "--fresh"],
                       check=True, env=env, capture_output=True)
        with open(os.path.join(out, "metrics.jsonl")) as f:
            rows = [json.loads(line) for line in f if '"step_seconds"' in line]
        rows = [dict(r, tokens=r["tokens"] / 2) for r in rows]  # both ranks' -> per rank
        results["cpp"].append(summarize(rows, a.warmup, 2))
        metrics = os.path.join(a.out, f"python{rep}.jsonl")
        subprocess.run(ztrun + [sys.executable, os.path.abspath(__file__), "--rank", "--config",
                                config, "--shard", shard, "--metrics", metrics,
                                "--steps", str(a.steps), "--micro", str(a.micro),
                                "--seq", str(a.seq), "--d-model", str(a.d_model),
                                "--layers", str(a.layers), "--heads", str(a.heads)],
                       check=True, env=env, capture_output=True)
        with open(metrics) as f:
            rows = [json.loads(line) for line in f]
        results["python"].append(summarize(rows, a.warmup, 2))
    lines = ["| side | median step (ms) | tokens/s | runs |", "|---|---|---|---|"]
    best = {}
    for side, runs in results.items():
        step = statistics.median(r[0] for r in runs)
        tokens = statistics.median(r[1] for r in runs)
        best[side] = step
        lines.append(f"| {side} | {step * 1e3:.1f} | {tokens:.0f} | "
                     + ", ".join(f"{r[0] * 1e3:.1f} ms" for r in runs) + " |")
    overhead = best["python"] / best["cpp"] - 1
    lines.append("")
    lines.append(f"Python front door overhead: {overhead * 100:+.1f}% of the C++ step time")
    text = "\n".join(lines)
    with open(os.path.join(a.out, "summary.md"), "w") as f:
        f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
