"""The same Hugging Face Trainer script under DeepSpeed and under zerotorch (bench/hf_trainer/
README.md): tokens/s and peak RSS per rank, 2 ranks, each ZeRO stage's Hugging Face config.

    python bench/hf_trainer/trainer_bench.py [--repeats 3] [--steps 16] [--out DIR]

The driver (this file without --worker) runs, per config and repeat, the worker under ztrun three
times in turn: DeepSpeed (transformers.Trainer, DeepSpeed's virtualenv), zerotorch
(zerotorch.hf.Trainer, the project's virtualenv, without DeepSpeed) and the model alone (its
forward and backward in a plain loop, no optimizer and no communication: the ceiling any engine
running this model's own arithmetic stays under), and writes DIR/summary.md. A worker trains a
random LlamaForCausalLM on random token rows of a fixed length; the steps after the warm-up ones
are timed, and each rank reports its peak RSS (ru_maxrss).
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def model_alone(args, model, rows):
    """The ceiling: this rank's forward and backward of the same model on the same rows, without
    an optimizer step, a gradient reduction or a gather, so what no engine can take off."""
    import torch
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    times = []
    for step in range(args.steps):
        batch = rows.ids[step * args.micro:(step + 1) * args.micro]
        model(input_ids=batch, labels=batch).loss.backward()
        model.zero_grad(set_to_none=True)
        times.append(time.perf_counter())
    return times, int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def worker(args):
    import torch
    if args.framework == "zerotorch":
        from zerotorch.hf import Trainer, TrainingArguments
    else:
        from transformers import Trainer, TrainingArguments
    import transformers

    class Rows(torch.utils.data.Dataset):
        def __init__(self, n):
            g = torch.Generator().manual_seed(1)
            self.ids = torch.randint(0, args.vocab, (n, args.seq), generator=g)

        def __len__(self):
            return len(self.ids)

        def __getitem__(self, i):
            return {"input_ids": self.ids[i], "labels": self.ids[i]}

    class Clock(transformers.TrainerCallback):
        def __init__(self):
            self.times = []

        def on_step_end(self, a, state, control, **kw):
            self.times.append(time.perf_counter())

    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.hidden * 8 // 3,
        num_hidden_layers=args.layers, num_attention_heads=args.hidden // 64,
        num_key_value_heads=args.hidden // 64, max_position_embeddings=args.seq))
    params = sum(p.numel() for p in model.parameters())
    if args.framework == "model":
        times, rank, world = model_alone(args, model, Rows(args.micro * args.steps))
        timed = times[args.warmup:]
        seconds = (timed[-1] - timed[0]) / (len(timed) - 1)
        print("RESULT " + json.dumps({
            "rank": rank, "params": params, "tokens_per_s": args.micro * args.seq * world / seconds,
            "rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}), flush=True)
        return
    training = TrainingArguments(
        output_dir=os.path.join(args.out, "run"), per_device_train_batch_size=args.micro,
        gradient_accumulation_steps=1, max_steps=args.steps, learning_rate=1e-4,
        warmup_steps=2, weight_decay=0.01, logging_steps=1000, save_strategy="no",
        report_to=[], seed=0, deepspeed=args.config, dataloader_drop_last=True, use_cpu=True,
        disable_tqdm=True)
    clock = Clock()
    trainer = Trainer(model=model, args=training, train_dataset=Rows(args.micro * 2 * args.steps),
                      callbacks=[clock])
    trainer.train()
    timed = clock.times[args.warmup:]
    seconds = (timed[-1] - timed[0]) / (len(timed) - 1)
    world = trainer.args.world_size
    print("RESULT " + json.dumps({
        "rank": trainer.args.process_index, "params": params,
        "tokens_per_s": args.micro * args.seq * world / seconds,
        "rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}), flush=True)


def run_one(args, framework, config, out):
    python = (os.path.expanduser("~/.cache/zerotorch/venv-deepspeed/bin/python")
              if framework == "deepspeed" else
              os.path.expanduser("~/.cache/zerotorch/venv-torch-2.11.0/bin/python"))
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.path.join(os.path.abspath(args.build_dir), "python"))
    os.makedirs(out, exist_ok=True)
    cmd = [os.path.join(args.build_dir, "bin", "ztrun"), "--standalone", "--nproc-per-node", "2",
           python, os.path.abspath(__file__), "--worker", "--framework", framework,
           "--config", config, "--out", out]
    for key in ("steps", "warmup", "micro", "seq", "hidden", "layers", "vocab"):
        cmd += [f"--{key}", str(getattr(args, key))]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, cwd=out, env=env)
    rows = [json.loads(line.split("RESULT ", 1)[1]) for line in r.stdout.splitlines()
            if "RESULT " in line]
    if len(rows) != 2:
        raise SystemExit(f"{framework} {config}: no result (exit {r.returncode}):\n"
                         f"{(r.stdout + r.stderr)[-3000:]}")
    return {"tokens_per_s": sum(x["tokens_per_s"] for x in rows) / 2,
            "rss_gib": max(x["rss_gib"] for x in rows), "params": rows[0]["params"]}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--worker", action="store_true")
    p.add_argument("--framework", default="zerotorch")
    p.add_argument("--config", default=None)
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "hf_trainer"))
    p.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--warmup", type=int, default=4)
    p.add_argument("--micro", type=int, default=4)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--configs", default="ds_config_zero2,ds_config_zero3")
    args = p.parse_args()
    if args.worker:
        return worker(args)
    data = os.path.join(ROOT, "tests", "data", "deepspeed-configs")
    lines = ["| config | side | tokens/s (median) | runs | peak RSS per rank (GiB, max) |",
             "|---|---|---:|---|---:|"]
    load = os.getloadavg()[0]
    for name in args.configs.split(","):
        config = os.path.join(data, f"hf-transformers-tests-{name}.json")
        runs = {"deepspeed": [], "zerotorch": [], "model": []}
        for r in range(args.repeats):
            for framework in runs:
                out = os.path.join(args.out, f"{name}-{framework}-{r}")
                runs[framework].append(run_one(args, framework, config, out))
                print(framework, name, r, runs[framework][-1], flush=True)
        med = {}
        for framework, rows in runs.items():
            med[framework] = statistics.median(x["tokens_per_s"] for x in rows)
            lines.append(f"| {name} | {framework} | {med[framework]:.0f} | "
                         + ", ".join(f"{x['tokens_per_s']:.0f}" for x in rows)
                         + f" | {max(x['rss_gib'] for x in rows):.2f} |")
        lines.append(f"| {name} | zerotorch / DeepSpeed | "
                     f"{med['zerotorch'] / med['deepspeed']:.2f}x | | |")
        lines.append(f"| {name} | model alone / DeepSpeed (the ceiling) | "
                     f"{med['model'] / med['deepspeed']:.2f}x | | |")
        lines.append(f"| {name} | zerotorch / model alone | "
                     f"{med['zerotorch'] / med['model']:.2f} | | |")
    lines.append("")
    lines.append(f"{runs['zerotorch'][0]['params'] / 1e6:.1f}M parameters; load average "
                 f"{load:.2f} before, {os.getloadavg()[0]:.2f} after")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
