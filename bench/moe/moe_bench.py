"""A small Mixtral trained by zerotorch's Python front door and by DeepSpeed, side by side
(bench/moe/README.md): the same `transformers` model (seeded), the same random batches, the same
DeepSpeed config (ZeRO stage S, fp32, AdamW, clipping 1.0), 2 ranks, one intra-op thread each.

  python bench/moe/moe_bench.py [--stages 2,3] [--eps 1,2] [--sides zt,ds] [--steps 8]
                                [--repeats 2] [--out DIR]

runs both sides alternately and prints a table of tokens/s and the larger rank's peak resident
memory. Each side is this file again, started per rank by its own launcher:

  ztrun ... moe_bench.py --side zt STAGE STEPS EP MODEL         (the project's virtualenv)
  deepspeed --num_gpus 2 moe_bench.py --side ds STAGE STEPS EP MODEL   (DeepSpeed's, CPU accelerator)

For the Mixtral, EP > 1 adds the expert_parallel block (enabled, autoep_size EP, preset_model
mixtral) to the config on both sides. `--model native` trains a decoder of DeepSpeed's own MoE
layers instead (NativeMoe), EP being their ep_size on both sides.
"""
import argparse
import json
import os
import re
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CACHE = os.path.expanduser("~/.cache/zerotorch")
ZT_PY = os.path.join(CACHE, "venv-torch-2.11.0", "bin", "python")
DS_BIN = os.path.join(CACHE, "venv-deepspeed", "bin")

VOCAB, SEQ, MICRO = 2048, 256, 4


def mixtral():
    """8 experts, top 2, 4 layers, hidden 256: 14.6M parameters, 12.6M of them experts."""
    import torch
    import transformers
    torch.manual_seed(1)
    cfg = transformers.MixtralConfig(vocab_size=VOCAB, hidden_size=256, intermediate_size=512,
                                     num_hidden_layers=4, num_attention_heads=8,
                                     num_key_value_heads=4, num_local_experts=8,
                                     num_experts_per_tok=2, max_position_embeddings=SEQ,
                                     tie_word_embeddings=False)
    cfg._attn_implementation = "sdpa"
    return transformers.MixtralForCausalLM(cfg)


class NativeMoe:
    """A decoder of DeepSpeed's own MoE layers (``deepspeed.moe.layer.MoE``): 4 blocks of causal
    attention (8 heads) and an MoE of 8 experts (MLP 256-512-256, GELU), top 2, DeepSpeed's
    gate defaults otherwise (capacity factor 1, tokens dropped, random token selection), the
    auxiliary loss at 0.01: 12.0M parameters, 8.4M of them experts. `ep` is every layer's
    ep_size: no config key, as under DeepSpeed."""

    def __new__(cls, ep):
        import torch
        from deepspeed.moe.layer import MoE

        class Block(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.norm1 = torch.nn.LayerNorm(256)
                self.attn = torch.nn.MultiheadAttention(256, 8, batch_first=True)
                self.norm2 = torch.nn.LayerNorm(256)
                expert = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(),
                                             torch.nn.Linear(512, 256))
                self.moe = MoE(hidden_size=256, expert=expert, num_experts=8, ep_size=ep, k=2)

            def forward(self, x, mask):
                h = self.norm1(x)
                x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
                out, l_aux, _ = self.moe(self.norm2(x))
                return x + out, l_aux

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.embed = torch.nn.Embedding(VOCAB, 256)
                self.blocks = torch.nn.ModuleList(Block() for _ in range(4))
                self.norm = torch.nn.LayerNorm(256)
                self.head = torch.nn.Linear(256, VOCAB, bias=False)

            def forward(self, input_ids, labels):
                n = input_ids.shape[1]
                mask = torch.triu(torch.full((n, n), float("-inf")), 1)
                x, aux = self.embed(input_ids), 0.0
                for block in self.blocks:
                    x, l_aux = block(x, mask)
                    aux = aux + l_aux
                logits = self.head(self.norm(x))[:, :-1]
                loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB),
                                                         labels[:, 1:].reshape(-1))
                return loss + 0.01 * aux

        torch.manual_seed(1)
        return Net()


def config(stage, ep=1):
    c = {"train_micro_batch_size_per_gpu": MICRO, "gradient_accumulation_steps": 1,
         "gradient_clipping": 1.0, "zero_optimization": {"stage": stage},
         "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.01}}}
    if ep > 1:
        c["expert_parallel"] = {"enabled": True, "autoep_size": ep, "preset_model": "mixtral"}
    return c


def _registry_get_with_default():
    """DeepSpeed 0.19.8's AutoEP reads transformers' output-capture registry as a dict
    (``registry.get(key, default)``), which transformers 5.25's ``_CanRecordRegistry.get(model)``
    is not: the registry's get takes a default again here, for DeepSpeed's side only."""
    from transformers.utils import output_capturing
    cls = type(output_capturing._CAN_RECORD_REGISTRY)
    original = cls.get

    def get(self, key, *default):
        return dict.get(self, key, *default) if default else original(self, key)

    cls.get = get


def side(kind, stage, steps, ep, model_kind):
    import torch
    native = model_kind == "native"
    model = NativeMoe(ep) if native else mixtral()
    # The native layers' ep_size is the model's own; the config has no expert_parallel block.
    cfg = config(stage, 1 if native else ep)
    if kind == "zt":
        import zerotorch
        engine, *_ = zerotorch.initialize(model=model, model_parameters=model.parameters(),
                                          config=cfg)
    else:
        import deepspeed
        if ep > 1 and not native:
            _registry_get_with_default()
        deepspeed.init_distributed(dist_backend="gloo")
        engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                          config=cfg)
    # zerotorch's ranks need no torch.distributed group; DeepSpeed's have one.
    rank = engine.global_rank
    world = engine.world_size
    seconds, losses = [], []
    for s in range(steps):
        torch.manual_seed(100 + s * world + rank)
        ids = torch.randint(1, VOCAB, (MICRO, SEQ))
        start = time.time()
        loss = engine(input_ids=ids, labels=ids)
        loss = loss if native else loss.loss
        engine.backward(loss)
        engine.step()
        seconds.append(time.time() - start)
        losses.append(loss.item())
    timed = seconds[1:]  # the first step builds buffers on both sides
    print("RESULT " + json.dumps({
        "side": kind, "model": model_kind, "stage": stage, "ep": ep, "rank": rank,
        "tokens_per_s": world * MICRO * SEQ * len(timed) / sum(timed),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "first_loss": losses[0], "last_loss": losses[-1]}), flush=True)


def launch(kind, stage, steps, build, ep, model_kind):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    args = [str(stage), str(steps), str(ep), model_kind]
    if kind == "zt":
        env["PYTHONPATH"] = os.path.join(build, "python")
        # DeepSpeed's MoE layer comes from the deepspeed package: its virtualenv's python
        # (which runs the project's torch) imports it.
        python = os.path.join(DS_BIN, "python") if model_kind == "native" else ZT_PY
        cmd = [os.path.join(build, "bin", "ztrun"), "--standalone", "--nproc-per-node", "2",
               python, os.path.abspath(__file__), "--side", "zt", *args]
    else:
        env["DS_ACCELERATOR"] = "cpu"
        env["PATH"] = env["PATH"] + os.pathsep + DS_BIN
        cmd = [os.path.join(DS_BIN, "deepspeed"), "--num_gpus", "2", os.path.abspath(__file__),
               "--side", "ds", *args]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    # The ranks' lines may interleave on one stream: each result is one flat JSON object.
    ranks = [json.loads(m) for m in re.findall(r"RESULT (\{[^{}]*\})", r.stdout + r.stderr)]
    # (DeepSpeed's stage-3 ranks on the CPU accelerator abort while exiting, "terminate called
    # without an active exception", after their steps: the results stand, the code is recorded.)
    if len(ranks) != 2:
        sys.exit(f"{kind} stage {stage} ep {ep} failed ({r.returncode}):\n{(r.stdout + r.stderr)[-3000:]}")
    # Rank 0's clock (a step ends together on both: its collectives), the larger rank's memory.
    row = next(x for x in ranks if x["rank"] == 0)
    row["peak_rss_mib"] = max(x["peak_rss_mib"] for x in ranks)
    row["exit_code"] = r.returncode
    return row


def main():
    if "--side" in sys.argv:
        args = [a for a in sys.argv[1:] if not a.startswith("--local_rank")]
        i = args.index("--side")
        side(args[i + 1], int(args[i + 2]), int(args[i + 3]), int(args[i + 4]), args[i + 5])
        return
    p = argparse.ArgumentParser()
    p.add_argument("--stages", default="2,3")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--eps", default="1", help="expert_parallel.autoep_size values, e.g. 1,2")
    p.add_argument("--sides", default="zt,ds")
    # native: the decoder of DeepSpeed's own MoE layers (NativeMoe), whose ep_size is EP on both
    # sides (DeepSpeed runs it at any ep_size; --ds-autoep does not apply).
    p.add_argument("--model", default="mixtral", choices=["mixtral", "native"])
    # DeepSpeed 0.19.8's AutoEP stops in deepspeed.initialize with transformers 5.25
    # (bench/moe/README.md): with this flag DeepSpeed's side runs it, the registry it reads given
    # a default again (_registry_get_with_default); without it DeepSpeed runs at ep 1 only.
    p.add_argument("--ds-autoep", action="store_true")
    p.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "moe"))
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rows = []
    load_before = os.getloadavg()[0]
    eps = [int(e) for e in a.eps.split(",")]
    sides = a.sides.split(",")
    for stage in [int(s) for s in a.stages.split(",")]:
        for _ in range(a.repeats):
            for ep in eps:
                for kind in sides:  # alternated, so drift hits both sides alike
                    if kind == "ds" and ep > 1 and not a.ds_autoep and a.model != "native":
                        continue
                    rows.append(launch(kind, stage, a.steps, a.build_dir, ep, a.model))
                    print(json.dumps(rows[-1]), flush=True)
    lines = [f"load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after", "",
             "| stage | autoep_size | side | tokens/s (median) | peak RSS MiB (larger rank) "
             "| runs (tokens/s) |", "|---|---|---|---|---|---|"]
    names = {"zt": "zerotorch (Python front door)", "ds": "DeepSpeed 0.19.8"}
    for stage in sorted({r["stage"] for r in rows}):
        for ep in eps:
            for kind in sides:
                runs = [r for r in rows
                        if r["stage"] == stage and r["side"] == kind and r["ep"] == ep]
                if not runs:
                    continue
                tps = sorted(r["tokens_per_s"] for r in runs)
                name = names[kind] + (" (AutoEP)" if kind == "ds" and ep > 1
                                      and a.model != "native" else "")
                lines.append(f"| {stage} | {ep} | {name} | {tps[len(tps) // 2]:.0f} | "
                             f"{max(r['peak_rss_mib'] for r in runs):.0f} | "
                             f"{', '.join(f'{t:.0f}' for t in tps)} |")
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(a.out, "summary.md"), "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
