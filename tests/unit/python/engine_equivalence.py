"""One rank of a zerotorch-vs-torch run (ztrun starts it): a small torch.nn.Module trained by
zerotorch.initialize's engine from a DeepSpeed config must end with the parameters of plain
single-process torch.optim.AdamW training on the same global batches (fp32, atol 1e-5). The
config leaves parameter groups to DeepSpeed's default: torch.optim.AdamW over model.parameters()
decays every parameter, biases and norms included, and so must the engine.

usage: engine_equivalence.py STAGE ACCUMULATION CLIP CHECKPOINT_DIR [decoupled] [+ STAGE ...]
Several cases separated by "+" run in the same ranks (tests/support/case_list.py); each prints
its own "equal" line.

decoupled: the checkpoint is saved in the background (checkpoint.writer.decoupled) while the
next step trains; it must resume the same way, and be `latest` once committed.
"""

import copy
import os
import sys

import torch
import torch.nn.functional as F

import zerotorch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "support"))
from case_list import run_each  # noqa: E402

STEPS, MICRO, LR, WD = 4, 3, 1e-2, 0.01


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = torch.nn.Linear(6, 16)
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(16, 16) for _ in range(2))
        self.norm = torch.nn.LayerNorm(16)
        self.out = torch.nn.Linear(16, 3)

    def forward(self, x):
        h = torch.tanh(self.inp(x))
        for b in self.blocks:
            h = h + torch.tanh(b(h))
        return self.out(self.norm(h))


def config(stage, acc, clip, world, decoupled=False):
    return {
        "checkpoint": {"writer": {"decoupled": decoupled}},
        "train_batch_size": MICRO * acc * world,
        "gradient_accumulation_steps": acc,
        "gradient_clipping": clip,
        "zero_optimization": {"stage": stage, "reduce_bucket_size": 97},
        "optimizer": {"type": "AdamW",
                      "params": {"lr": LR, "weight_decay": WD, "betas": [0.9, 0.999],
                                 "eps": 1e-8}},
    }


def run_case(argv):
    stage, acc, clip, ckpt = int(argv[0]), int(argv[1]), float(argv[2]), argv[3]
    decoupled = argv[4:] == ["decoupled"]
    torch.manual_seed(0)
    model = Net()
    reference = copy.deepcopy(model)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    data = [(torch.randn(MICRO * world, 6), torch.randn(MICRO * world, 3))
            for _ in range(STEPS * acc)]

    engine, _, _, _ = zerotorch.initialize(model=model, model_parameters=model.parameters(),
                                           config=config(stage, acc, clip, world, decoupled))
    rank = engine.global_rank
    assert engine.world_size == world, (engine.world_size, world)
    assert engine.module is model
    losses = []
    for x, y in data:
        xs, ys = x[rank * MICRO:(rank + 1) * MICRO], y[rank * MICRO:(rank + 1) * MICRO]
        loss = F.mse_loss(engine(xs), ys)
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    assert engine.global_steps == STEPS, engine.global_steps

    opt = torch.optim.AdamW(reference.parameters(), lr=LR, weight_decay=WD, eps=1e-8)
    for s in range(STEPS):
        opt.zero_grad()
        for x, y in data[s * acc:(s + 1) * acc]:
            (F.mse_loss(reference(x), y) / acc).backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(reference.parameters(), clip)
        opt.step()
    for (name, got), (_, want) in zip(model.named_parameters(), reference.named_parameters()):
        torch.testing.assert_close(got.detach(), want.detach(), rtol=0, atol=1e-5,
                                   msg=lambda m, n=name: f"{n}: {m}")

    # A checkpoint resumes bit-identically: save, train one more step, load, train it again.
    engine.save_checkpoint(ckpt, client_state={"losses": losses})
    x, y = data[0]
    xs, ys = x[rank * MICRO:(rank + 1) * MICRO], y[rank * MICRO:(rank + 1) * MICRO]

    def one_step():
        for _ in range(acc):
            engine.backward(F.mse_loss(engine(xs), ys))
            engine.step()
        return [p.detach().clone() for p in model.parameters()]

    first = one_step()
    _, client = engine.load_checkpoint(ckpt)
    if decoupled:  # committed by a step once every rank had written it, or by the load
        with open(f"{ckpt}/latest") as f:
            assert f.read().strip() == f"global_step{STEPS}"
    assert client["losses"] == losses
    assert engine.global_steps == STEPS
    second = one_step()
    for a, b in zip(first, second):
        assert torch.equal(a, b)
    engine.destroy()
    print(f"rank {rank}: {' '.join(argv)}: equal", flush=True)


if __name__ == "__main__":
    run_each(run_case)
