"""DeepSpeed's own MoE layer (``deepspeed.moe.layer.MoE``, run from the deepspeed package) in a
model trained by ``zerotorch.initialize``: at ``ep_size`` 1 its gate, capacity and experts are
DeepSpeed's code and its experts ordinary parameters, ZeRO-sharded with the rest, so one rank
trains like plain torch AdamW on the same batches (losses within 1e-6, parameters within 1e-6 of
each tensor's norm) at stages 2 and 3; ``ep_size`` 2 is refused with one line naming the layer.
Run with the DeepSpeed virtualenv's python (scripts/setup_deepspeed.sh), one process.

usage: native_moe.py OUT
"""

import copy
import os
import sys

import torch
from deepspeed.moe.layer import MoE

import zerotorch

STEPS, LR = 4, 1e-2


class Net(torch.nn.Module):
    def __init__(self, ep_size=1):
        super().__init__()
        self.embed = torch.nn.Embedding(32, 16)
        # Random token selection and a second-expert sample would draw random numbers in the
        # layer: off, so both sides route alike.
        self.moe = MoE(hidden_size=16, expert=torch.nn.Linear(16, 16), num_experts=4,
                       ep_size=ep_size, k=1, use_rts=False, min_capacity=0)
        self.head = torch.nn.Linear(16, 32)

    def forward(self, ids, labels):
        h, l_aux, _ = self.moe(self.embed(ids))
        logits = self.head(h)
        return torch.nn.functional.cross_entropy(logits.reshape(-1, 32), labels.reshape(-1)) \
            + 0.01 * l_aux


def train_like_torch(stage, out):
    torch.manual_seed(0)
    model = Net()
    reference = copy.deepcopy(model)
    g = torch.Generator().manual_seed(1)
    data = [torch.randint(0, 32, (2, 12), generator=g) for _ in range(STEPS)]
    config = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
              "optimizer": {"type": "AdamW", "params": {"lr": LR, "weight_decay": 0.0}},
              "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 0},
              "steps_per_print": 1000}
    engine, _, _, _ = zerotorch.initialize(model=model, config=config, device="cpu")
    losses = []
    for ids in data:
        loss = engine(ids, ids.roll(1, 1))
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    opt = torch.optim.AdamW(reference.parameters(), lr=LR, weight_decay=0.0)
    for i, ids in enumerate(data):
        opt.zero_grad()
        loss = reference(ids, ids.roll(1, 1))
        loss.backward()
        opt.step()
        assert abs(loss.item() - losses[i]) <= 1e-6 * abs(loss.item()), (stage, i, losses)
    with zerotorch.zero.GatheredParameters(list(model.parameters())):
        for (name, got), want in zip(model.named_parameters(), reference.parameters()):
            diff = (got.detach() - want.detach()).norm().item()
            assert diff <= 1e-6 * max(1.0, want.norm().item()), (stage, name, diff)
    engine.destroy()
    print(f"stage {stage}: {len(losses)} steps like torch", flush=True)


def refuses_expert_parallel():
    try:
        zerotorch.initialize(model=Net(ep_size=2), config={
            "train_micro_batch_size_per_gpu": 2,
            "optimizer": {"type": "AdamW", "params": {"lr": LR}},
            "zero_optimization": {"stage": 2}}, device="cpu")
    except ValueError as e:
        line = str(e)
        assert "moe" in line and "ep_size 2" in line and "\n" not in line, line
        print(f"refused: {line}", flush=True)
        return
    raise AssertionError("ep_size 2 was not refused")


if __name__ == "__main__":
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for stage in (2, 3):
        train_like_torch(stage, out)
    refuses_expert_parallel()
    print("native moe: equal", flush=True)
