"""The PyTorch side of bench/capacity: one rank of a torchrun job (gloo, CPU) that builds the GPT of
bench/peers (models/gpt's model in Python) at the given size and trains it for --steps optimizer
steps on random tokens, as the strongest PyTorch setup for each mode would:

    ddp    DistributedDataParallel, fp32 parameters, torch.optim.AdamW(fused=True)
    fsdp2  fully_shard per block and at the root, built on the meta device and materialised
           shard by shard (FSDP2's own way to build a model that does not fit whole), bf16
           compute with fp32 sharded parameters, gradients reduced in fp32 (MixedPrecisionPolicy),
           torch.optim.AdamW(fused=True) on the shards

Rank 0 writes one JSON object to --json: tokens/s over the steps after the first, the parameter
count, and model-state bytes per rank. Peak RSS is measured outside, by run_capacity.py.
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "peers"))
from peers_torch import Gpt, model_state_bytes  # noqa: E402


def build(mode, meta):
    if mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = Gpt(meta)
        return DDP(model, gradient_as_bucket_view=True), model
    if mode == "fsdp2":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        with torch.device("meta"):
            model = Gpt(meta)
        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for block in model.blocks:
            fully_shard(block, mesh=mesh, mp_policy=mp)
        fully_shard(model, mesh=mesh, mp_policy=mp)
        model.to_empty(device="cpu")
        torch.manual_seed(1234)
        for m in model.modules():
            if hasattr(m, "reset_parameters"):
                m.reset_parameters()
        return model, model
    raise SystemExit(f"unknown --mode {mode}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", required=True, choices=["ddp", "fsdp2"])
    ap.add_argument("--n-layer", type=int, required=True)
    ap.add_argument("--d-model", type=int, required=True)
    ap.add_argument("--n-head", type=int, required=True)
    ap.add_argument("--vocab", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--batch", type=int, required=True, help="sequences per rank per step")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--json", required=True)
    a = ap.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1234)
    meta = dict(d_model=a.d_model, n_head=a.n_head, n_layer=a.n_layer, vocab_size=a.vocab,
                max_seq_len=a.seq)
    wrapped, model = build(a.mode, meta)
    params = sum(p.numel() for p in model.parameters())  # a DTensor's numel is the global one
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    gen = torch.Generator().manual_seed(100 + rank)
    mask = torch.ones(a.batch, a.seq, dtype=torch.long)
    times = []
    for _ in range(a.steps):
        ids = torch.randint(0, a.vocab, (a.batch, a.seq + 1), generator=gen)
        t = time.time()
        loss = Gpt.loss(wrapped(ids[:, :-1], mask), ids[:, 1:])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.time() - t)
    states = model_state_bytes(model, opt)
    dist.barrier()
    if rank == 0:
        timed = times[1:] or times
        with open(a.json, "w") as f:
            json.dump({"parameters": params, "step_seconds": timed,
                       "tokens_per_s": a.batch * a.seq * world * len(timed) / sum(timed),
                       "model_state_bytes_per_rank": states}, f)
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)  # as bench/peers: skip the interpreter teardown where torch's workers can abort


if __name__ == "__main__":
    main()
