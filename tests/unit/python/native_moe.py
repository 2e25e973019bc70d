"""DeepSpeed's own MoE layer (``deepspeed.moe.layer.MoE``, run from the deepspeed package) in a
model trained by ``zerotorch.initialize``. Run with the DeepSpeed virtualenv's python
(scripts/setup_deepspeed.sh).

- ``native_moe.py one OUT`` (one process): at ``ep_size`` 1 the layer's gate, capacity and experts
  are DeepSpeed's code and its experts ordinary parameters, ZeRO-sharded with the rest: trains
  like plain torch AdamW on the same batches (losses within 1e-6, parameters within 1e-6 of each
  tensor's norm) at stages 2 and 3, its parameters handed over as DeepSpeed's MoE tutorial does
  (split into MoE groups). Layers of different ``ep_size``, a config asking for another
  expert-parallel size than the layers', and parameter groups with their own learning rate are
  refused in one line.
- ``native_moe.py ranks OUT`` (under ztrun, 2 or 4 ranks): the layers at ``ep_size`` 2, their
  experts dealt over expert groups of consecutive ranks (python/zerotorch/native_moe.py), train
  as DeepSpeed's data parallelism defines it, computed in one process: each rank's loss is the
  ep-1 layer's on that rank's batch (the same capacity from its own tokens, the same random
  token selection, the same auxiliary loss), and every gradient is the average of the ranks'
  gradients. DeepSpeed's defaults (top-1, capacity factor 1, min capacity 4, tokens dropped,
  random token selection), top-1 and top-2 without dropping and top-3 (DeepSpeed's three gating
  functions), stages 1-3, clipping that acts. Losses
  within 1e-5, parameters within 1e-5 of each tensor's norm, each expert compared under its
  global name. On 4 ranks (ep 2 over 2 expert-data-parallel ranks) a checkpoint saved at ep 2 is
  resumed at ep 1 and that one at ep 2 again, and the 16-bit exports hold every expert under the
  name the ep-1 layer gives it.
"""

import copy
import os
import sys

import torch
from deepspeed.moe.layer import MoE
from deepspeed.moe.utils import split_params_into_different_moe_groups_for_optimizer

import zerotorch

LR, E, WIDTH, VOCAB = 1e-2, 4, 16, 32


class Net(torch.nn.Module):
    def __init__(self, ep_size=1, k=1, drop_tokens=True, use_rts=True, min_capacity=4):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.moe = MoE(hidden_size=WIDTH, expert=torch.nn.Linear(WIDTH, WIDTH), num_experts=E,
                       ep_size=ep_size, k=k, drop_tokens=drop_tokens, use_rts=use_rts,
                       min_capacity=min_capacity)
        self.head = torch.nn.Linear(WIDTH, VOCAB)

    def forward(self, ids, labels):
        h, l_aux, _ = self.moe(self.embed(ids))
        logits = self.head(h)
        return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1)) \
            + 0.01 * l_aux


def config(stage, clip=0.0):
    return {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
            "gradient_clipping": clip,
            "optimizer": {"type": "AdamW", "params": {"lr": LR, "weight_decay": 0.01}},
            "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 0,
                                  "stage3_gather_16bit_weights_on_model_save": True},
            "steps_per_print": 1000}


# --- one process, ep_size 1 -------------------------------------------------------------------

def train_like_torch(stage):
    torch.manual_seed(0)
    # Random token selection and a second-expert sample would draw random numbers in the layer:
    # off, so both sides route alike without reseeding.
    model = Net(use_rts=False, min_capacity=0)
    reference = copy.deepcopy(model)
    g = torch.Generator().manual_seed(1)
    data = [torch.randint(0, VOCAB, (2, 12), generator=g) for _ in range(4)]
    c = config(stage)
    c["optimizer"]["params"]["weight_decay"] = 0.0
    # DeepSpeed's MoE tutorial hands its parameters split into MoE groups.
    groups = split_params_into_different_moe_groups_for_optimizer(
        {"params": list(model.parameters()), "name": "parameters"})
    assert any(g.get("moe") for g in groups), groups
    engine, _, _, _ = zerotorch.initialize(model=model, model_parameters=groups, config=c,
                                           device="cpu")
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


def refused(model, c, *words):
    try:
        zerotorch.initialize(model=model, config=c, device="cpu")
    except ValueError as e:
        line = str(e)
        assert all(w in line for w in words) and "\n" not in line, line
        print(f"refused: {line}", flush=True)
        return
    raise AssertionError(f"not refused: {words}")


def one_process():
    for stage in (2, 3):
        train_like_torch(stage)
    mixed = Net()
    mixed.second = MoE(hidden_size=WIDTH, expert=torch.nn.Linear(WIDTH, WIDTH), num_experts=E,
                       ep_size=2)
    refused(mixed, config(2), "different ep_size")
    other = config(2)
    other["expert_parallel"] = {"enabled": True, "autoep_size": 4}
    refused(Net(ep_size=2), other, "autoep_size 4", "ep_size 2")
    model = Net()
    try:
        zerotorch.initialize(model=model, config=config(2), device="cpu", model_parameters=[
            {"params": list(model.parameters()), "lr": 1e-3}])
        raise AssertionError("a group with its own lr was not refused")
    except ValueError as e:
        assert "lr" in str(e) and "\n" not in str(e), e
        print(f"refused: {e}", flush=True)
    print("native moe: equal", flush=True)


# --- ranks, ep_size 2 -------------------------------------------------------------------------

class Reference:
    """DeepSpeed's data parallelism over `world` ranks in one process: the ep-1 model on each
    rank's batch, its random draws seeded as that rank seeds them, the gradients averaged."""

    def __init__(self, world, clip, **layer):
        torch.manual_seed(0)
        self.model = Net(**layer)
        # DeepSpeed deep-copies one expert for all: made different, so that dealing them wrong
        # shows.
        g = torch.Generator().manual_seed(5)
        with torch.no_grad():
            for name, p in self.model.named_parameters():
                if ".deepspeed_experts." in name:
                    p.add_(0.3 * torch.randn(p.shape, generator=g))
        self.world, self.clip = world, clip
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=LR, weight_decay=0.01)
        self.clipped = 0

    def step(self, batches, step):
        self.opt.zero_grad()
        losses = []
        for r, ids in enumerate(batches):
            torch.manual_seed(1000 * step + r)
            loss = self.model(ids, ids.roll(1, 1))
            (loss / self.world).backward()
            losses.append(loss.item())
        if self.clip:
            norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
            self.clipped += int(norm > self.clip)
        self.opt.step()
        return losses


def rank_model(reference, ep, rank, **layer):
    """This rank's model at ep_size `ep` with the reference's weights: its experts the ones its
    place in its expert group holds (DeepSpeed's deal: rank j keeps [j E/ep, (j+1) E/ep))."""
    model = Net(ep_size=ep, **layer)
    first = (rank % ep) * (E // ep)
    want = reference.model.state_dict()
    mine = {}
    for name in model.state_dict():
        if ".deepspeed_experts." in name:
            head, rest = name.split(".deepspeed_experts.")
            local, tail = rest.split(".", 1)
            mine[name] = want[f"{head}.deepspeed_experts.{first + int(local)}.{tail}"]
        else:
            mine[name] = want[name]
    model.load_state_dict(mine)
    return model


def check_params(engine, reference, what):
    """Every parameter this rank holds (its experts under their global names) against the
    reference's."""
    want = dict(reference.model.named_parameters())
    with zerotorch.zero.GatheredParameters(list(engine.module.parameters())):
        for name, got in engine.module.named_parameters():
            assert name in want, (what, name)
            diff = (got.detach() - want[name].detach()).norm().item()
            assert diff <= 1e-5 * max(1.0, want[name].norm().item()), (what, name, diff)


def train(engine, reference, data, first_step, rank, what):
    for i, batches in enumerate(data):
        step = first_step + i
        torch.manual_seed(1000 * step + rank)
        loss = engine(batches[rank], batches[rank].roll(1, 1))
        engine.backward(loss)
        engine.step()
        want = reference.step(batches, step)[rank]
        assert abs(loss.item() - want) <= 1e-5 * abs(want), (what, step, loss.item(), want)


def batches_for(world, steps, seed):
    g = torch.Generator().manual_seed(seed)
    return [[torch.randint(0, VOCAB, (2, 12), generator=g) for _ in range(world)]
            for _ in range(steps)]


def ep2_like_data_parallel(world, rank, stage, clip, layer, steps=4):
    what = f"ep2 stage {stage} {layer}"
    reference = Reference(world, clip, **layer)
    model = rank_model(reference, 2, rank, **layer)
    engine, *_ = zerotorch.initialize(model=model, config=config(stage, clip), device="cpu")
    assert engine.expert_parallel_size == 2, engine.expert_parallel_size
    train(engine, reference, batches_for(world, steps, 11 + stage), 0, rank, what)
    if clip:
        assert reference.clipped > 0, (what, "clipping never acted")
    check_params(engine, reference, what)
    engine.destroy()
    print(f"{what}: {steps} steps like data parallelism", flush=True)


def resume_across_ep_sizes(world, rank, out):
    """ep 2 (stage 2) saved, resumed at ep 1 (stage 3) and saved, resumed at ep 2 (stage 1)."""
    layer = {}
    reference = Reference(world, 0.0, **layer)
    data = batches_for(world, 7, 3)
    ckpt = os.path.join(out, "ckpt")
    engine, *_ = zerotorch.initialize(model=rank_model(reference, 2, rank), config=config(2),
                                      device="cpu")
    train(engine, reference, data[:3], 0, rank, "resume: ep 2")
    engine.save_checkpoint(ckpt, tag="a")
    assert engine.save_16bit_model(out, "ep2.safetensors")
    exported = {n: p.detach().clone() for n, p in reference.model.named_parameters()}
    engine.destroy()
    torch.manual_seed(123 + rank)  # weights the checkpoint must replace
    engine, *_ = zerotorch.initialize(model=Net(), config=config(3), device="cpu")
    engine.load_checkpoint(ckpt, tag="a")
    train(engine, reference, data[3:5], 3, rank, "resume: ep 1")
    engine.save_checkpoint(ckpt, tag="b")
    engine.destroy()
    torch.manual_seed(321 + rank)
    engine, *_ = zerotorch.initialize(model=Net(ep_size=2), config=config(1), device="cpu")
    engine.load_checkpoint(ckpt, tag="b")
    train(engine, reference, data[5:], 5, rank, "resume: ep 2 again")
    check_params(engine, reference, "resume")
    assert engine.save_16bit_model(out, "ep2_again.pt")
    engine.destroy()
    if rank == 0:
        from safetensors.torch import load_file
        for path, want in ((os.path.join(out, "ep2.safetensors"), exported),
                           (os.path.join(out, "ep2_again.pt"),
                            dict(reference.model.named_parameters()))):
            got = load_file(path) if path.endswith(".safetensors") else torch.load(path)
            assert sorted(got) == sorted(want), (path, sorted(got))
            for name, value in want.items():
                diff = (got[name].float() - value.detach()).norm().item()
                assert diff <= 1e-5 * max(1.0, value.norm().item()), (path, name, diff)
    print("resume across ep sizes: like data parallelism", flush=True)


def ranks(out):
    world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
    os.makedirs(out, exist_ok=True)
    if world == 2:
        for stage in (1, 2, 3):
            ep2_like_data_parallel(world, rank, stage, 0.05 if stage == 2 else 0.0, {})
        ep2_like_data_parallel(world, rank, 2, 0.0, {"k": 2, "drop_tokens": False})
        ep2_like_data_parallel(world, rank, 1, 0.0, {"drop_tokens": False})
        ep2_like_data_parallel(world, rank, 3, 0.0, {"k": 3})
    else:
        ep2_like_data_parallel(world, rank, 3, 0.05, {"k": 2, "drop_tokens": False})
        resume_across_ep_sizes(world, rank, out)
    print(f"rank {rank}: equal", flush=True)


if __name__ == "__main__":
    mode, out = sys.argv[1], sys.argv[2]
    one_process() if mode == "one" else ranks(out)
