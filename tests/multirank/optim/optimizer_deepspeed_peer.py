"""DeepSpeed's own optimizers and schedules on a tiny model, step by step, for
optimizer_deepspeed_test.cpp.

Runs under the DeepSpeed venv (DS_ACCELERATOR=cpu, world 1, gloo). --blocks NAME=JSON names the
config blocks (optimizer, and optionally scheduler) of a kind of case; for each case given as
--case NAME:STAGE:CLIP (all in one process, one DeepSpeed import; the test runs it with
TORCHDYNAMO_DISABLE=1, so DeepSpeed's muon_update runs eagerly instead of compiled), it
writes, as raw little-endian files under --out/<NAME>_stage<STAGE>_clip<CLIP>/:
  tokens.bin       int64 (steps, batch, seq)   the inputs of every step
  targets.bin      int64 (steps, batch, seq)
  init/<name>.bin  float32, each parameter before the first step (before any bf16 cast)
  step<k>/<name>.bin  float32, each parameter after step k (1-based; bf16 values widened)
  losses.bin       float64 (steps,)
The model (TinyMuonModel) is written the same way in the C++ test; parameter names are its own.
"""
import argparse
import json
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, WIDTH, HIDDEN, BATCH, SEQ = 11, 8, 16, 4, 5


class TinyMuonModel(nn.Module):
    # embed and lm_head go to the auxiliary Adam by name; up (16x8, tall), down (8x16, wide: the
    # Gram iteration) and mix (8x8, square) to Muon; biases and the norm to Adam by shape.
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.up = nn.Linear(WIDTH, HIDDEN)
        self.down = nn.Linear(HIDDEN, WIDTH)
        self.mix = nn.Linear(WIDTH, WIDTH, bias=False)
        self.norm = nn.LayerNorm(WIDTH)
        self.lm_head = nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, tokens, targets):
        x = self.embed(tokens)
        x = x + self.down(F.gelu(self.up(x)))
        x = x + self.mix(torch.tanh(x))
        logits = self.lm_head(self.norm(x))
        return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--blocks", action="append", required=True,
                    help="NAME=JSON: the config blocks a case of that name merges in")
    ap.add_argument("--case", action="append", required=True, help="NAME:STAGE:CLIP")
    ap.add_argument("--steps", type=int, default=10)
    a = ap.parse_args()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
    import deepspeed
    from deepspeed.runtime.zero.muon import original_muon
    pinned = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}.get(
        os.environ.get("ZT_MUON_NS_DTYPE", ""))
    if pinned is not None:
        # The C++ side reads the same variable (optim/muon.h): both iterate in one dtype.
        original_muon.ns_compute_dtype = lambda ns_method="gram": pinned
    deepspeed.init_distributed(dist_backend="gloo")
    blocks = dict(b.split("=", 1) for b in a.blocks)
    for case in a.case:
        name, stage, clip = case.split(":")
        run(deepspeed, a, json.loads(blocks[name]), int(stage), float(clip),
            os.path.join(a.out, f"{name}_stage{stage}_clip{clip}"))


def run(deepspeed, a, blocks, stage, clip, out):
    torch.manual_seed(7)
    model = TinyMuonModel()
    tokens = torch.randint(0, VOCAB, (a.steps, BATCH, SEQ))
    targets = torch.randint(0, VOCAB, (a.steps, BATCH, SEQ))
    os.makedirs(os.path.join(out, "init"), exist_ok=True)
    tokens.numpy().tofile(os.path.join(out, "tokens.bin"))
    targets.numpy().tofile(os.path.join(out, "targets.bin"))

    def dump(dirname):
        os.makedirs(os.path.join(out, dirname), exist_ok=True)
        for n, p in model.named_parameters():
            p.detach().float().contiguous().numpy().tofile(os.path.join(out, dirname, n + ".bin"))

    dump("init")
    config = {
        "train_batch_size": BATCH,
        "train_micro_batch_size_per_gpu": BATCH,
        **blocks,
        # DeepSpeed's stage 3 refuses Muon with reduce_scatter (its default). A case's own
        # zero_optimization block (offload) is kept.
        "zero_optimization": dict(blocks.get("zero_optimization", {}), stage=stage,
                                  reduce_scatter=stage != 3),
        "gradient_clipping": clip,
    }
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    losses = []
    for s in range(a.steps):
        loss = engine(tokens[s], targets[s])
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
        # The module's parameters are the published values after step() (fp32, or bf16 with
        # bf16 enabled, dumped as fp32); at stage 3 they are gathered for the dump.
        with deepspeed.zero.GatheredParameters(list(model.parameters()), enabled=stage == 3):
            dump(f"step{s + 1}")
    torch.tensor(losses, dtype=torch.float64).numpy().tofile(os.path.join(out, "losses.bin"))
    aux = getattr(getattr(engine, "basic_optimizer", None), "aux_optimizer", None)
    groups = getattr(engine.optimizer, "param_groups", [{}])
    print(f"{out}: losses {losses}; auxiliary Adam {type(aux).__name__}; "
          f"last betas {groups[0].get('betas')}")


if __name__ == "__main__":
    main()
    # Leave without finalizing the interpreter: a gloo worker thread may still be dropping the
    # last collective's tensors then, and taking the GIL during finalization aborts the process
    # now and then. Everything is written.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
