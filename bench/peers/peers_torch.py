"""The PyTorch side of bench/peers: one rank of a torchrun job (gloo, CPU).

    torchrun --standalone --nproc-per-node 2 bench/peers/peers_torch.py \
        --export-dir DIR --mode ddp

Trains models/gpt's model, rewritten below in Python with the same parameter names and the
same arithmetic, from DIR/init.safetensors (zerotorch's initial weights) on DIR/batches_r<r>.bin
(the batches zerotorch's sampler gives rank r; layout in peers_zt_main.cpp), with
torch.optim.AdamW and the hyper-parameters of DIR/meta.json, under one of:

    ddp            DistributedDataParallel (bucket_cap_mb = zerotorch's bucket size)
    zero           DDP + ZeroRedundancyOptimizer (optimizer state sharded by parameter)
    fsdp2          fully_shard per block and at the root, reshard_after_forward=True (ZeRO-3)
    fsdp2-noreshard  the same with reshard_after_forward=False (parameters stay gathered
                   between forward and backward: ZeRO-2-like traffic)
    hsdp           fully_shard over a 2-D mesh (replicate, shard) of --shard-size consecutive
                   ranks: HSDP, sharded within a group and replicated across groups

Rank 0 appends one JSON row (same fields as zt_bench_peers --run) to --json.
"""

import argparse
import json
import math
import os
import statistics
import struct
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

BATCH_MAGIC = b"ZTPEERS1"


# ---- the model: models/gpt/gpt_model.cpp and gpt_block.cpp ------------------------------

class CausalSelfAttention(nn.Module):
    def __init__(self, d_model, n_head):
        super().__init__()
        self.n_head = n_head
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x, mask):
        b, t, c = x.shape
        q, k, v = self.qkv(x).chunk(3, -1)
        heads = lambda y: y.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), attn_mask=mask,
                                           dropout_p=0.0)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class GptBlock(nn.Module):
    """Pre-LayerNorm: x + attn(ln1(x)), then h + mlp(ln2(h)); exact (erf) GELU."""

    def __init__(self, d_model, n_head):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_head)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.out = nn.Linear(4 * d_model, d_model)

    def forward(self, x, mask):
        h = x + self.attn(self.ln1(x), mask)
        return h + self.out(F.gelu(self.fc(self.ln2(h))))


class Gpt(nn.Module):
    def __init__(self, meta):
        super().__init__()
        c = meta["d_model"]
        self.wte = nn.Embedding(meta["vocab_size"], c)
        self.wpe = nn.Embedding(meta["max_seq_len"], c)
        # Registered in models/gpt's order (the root, then the blocks): the weights fnv64 hashes
        # named_parameters() in order.
        self.ln_f = nn.LayerNorm(c)
        self.blocks = nn.ModuleList(GptBlock(c, meta["n_head"]) for _ in range(meta["n_layer"]))

    def forward(self, input_ids, attention_mask):
        b, t = input_ids.shape
        x = self.wte(input_ids) + self.wpe(torch.arange(t))
        # (B, 1, T, T): causal AND the key is a real token (the collator pads on the right).
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        mask = causal.view(1, 1, t, t) & attention_mask.to(torch.bool).view(b, 1, 1, t)
        for block in self.blocks:
            x = block(x, mask)
        return F.linear(self.ln_f(x), self.wte.weight)  # tied head

    @staticmethod
    def loss(logits, labels):
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), labels.reshape(-1),
                               ignore_index=-100)


# ---- inputs ------------------------------------------------------------------------------

def read_batches(path):
    """[(input_ids, attention_mask, labels)] as (B, T) int64 tensors."""
    raw = np.fromfile(path, dtype=np.uint8)
    if raw[:8].tobytes() != BATCH_MAGIC:
        raise SystemExit(f"{path} is not a bench/peers batch file")
    words = raw[8:].view(np.int64)
    n, pos, out = int(words[0]), 1, []
    for _ in range(n):
        b, t = int(words[pos]), int(words[pos + 1])
        pos += 2
        parts = []
        for _ in range(3):
            parts.append(torch.from_numpy(words[pos:pos + b * t].reshape(b, t).copy()))
            pos += b * t
        out.append(tuple(parts))
    if pos != len(words):
        raise SystemExit(f"{path}: {len(words) - pos} trailing words")
    return out


def weights_fnv64(state):
    """FNV-1a over the fp32 bytes of every tensor in model order (peers_zt_main.cpp's)."""
    h = 1469598103934665603
    mask = (1 << 64) - 1
    for _, t in state:
        for byte in t.detach().float().contiguous().numpy().tobytes():
            h = ((h ^ byte) * 1099511628211) & mask
    return f"{h:x}"


def load_initial_weights(model, run_dir, meta, check_fnv):
    from safetensors.torch import load_file
    tensors = load_file(os.path.join(run_dir, "init.safetensors"))
    names = [n for n, _ in model.named_parameters()]
    if sorted(names) != sorted(tensors):
        raise SystemExit(f"parameter names differ: torch {sorted(names)} vs "
                         f"safetensors {sorted(tensors)}")
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(tensors[n])
    if check_fnv:
        got = weights_fnv64(model.named_parameters())
        if got != meta["weights_fnv64"]:
            raise SystemExit(f"loaded weights fnv64 {got} != exported {meta['weights_fnv64']}")


# ---- measurement -------------------------------------------------------------------------

def status_bytes(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    return 0


def tensor_bytes(t):
    if t is None:
        return 0
    if hasattr(t, "to_local"):  # DTensor: this rank's shard
        t = t.to_local()
    return t.numel() * t.element_size()


def model_state_bytes(model, optimizer):
    """Parameters + gradients + optimizer state this rank holds (its shards for FSDP2 and for
    ZeroRedundancyOptimizer's state). DDP's gradients are bucket views (gradient_as_bucket_view),
    so they are counted once."""
    n = 0
    for p in model.parameters():
        n += tensor_bytes(p) + tensor_bytes(p.grad)
    opt = getattr(optimizer, "optim", optimizer)  # ZeroRedundancyOptimizer wraps the local one
    for state in opt.state.values():
        for v in state.values():
            if torch.is_tensor(v):
                n += tensor_bytes(v)
    return n


# ---- setups ------------------------------------------------------------------------------

class AdamWZtMath(torch.optim.Optimizer):
    """Diagnostic only (--adamw zt-math): AdamW with optim/adam.cpp's rounding, m = b1 m + (1-b1) g
    as mul_ + add_, where torch.optim.AdamW rounds once in lerp_. Everything else is the same
    formula in the same order. Tells optimizer rounding apart from other causes of loss drift."""

    def __init__(self, params, lr, betas, eps, weight_decay):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self):
        for g in self.param_groups:
            b1, b2 = g["betas"]
            for p in g["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                if not st:
                    st["step"] = 0
                    st["exp_avg"] = torch.zeros_like(p)
                    st["exp_avg_sq"] = torch.zeros_like(p)
                st["step"] += 1
                t, m, v, d = st["step"], st["exp_avg"], st["exp_avg_sq"], p.grad
                p.mul_(1 - g["lr"] * g["weight_decay"])
                bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
                m.mul_(b1).add_(d, alpha=1 - b1)
                v.mul_(b2).addcmul_(d, d, value=1 - b2)
                denom = (v.sqrt() / math.sqrt(bc2)).add_(g["eps"])
                p.addcdiv_(m, denom, value=-g["lr"] / bc1)

def build(mode, model, meta, adamw="torch", shard_size=0):
    adamw_class = AdamWZtMath if adamw == "zt-math" else torch.optim.AdamW
    hyper = dict(lr=meta["lr"], betas=(meta["beta1"], meta["beta2"]), eps=meta["eps"],
                 weight_decay=meta["weight_decay"])
    if mode in ("ddp", "zero"):
        from torch.nn.parallel import DistributedDataParallel as DDP
        wrapped = DDP(model, bucket_cap_mb=meta["bucket_elements"] * 4 / 2**20,
                      gradient_as_bucket_view=True)
        if mode == "ddp":
            return wrapped, adamw_class(model.parameters(), **hyper)
        from torch.distributed.optim import ZeroRedundancyOptimizer
        return wrapped, ZeroRedundancyOptimizer(model.parameters(),
                                                optimizer_class=adamw_class, **hyper)
    if mode in ("fsdp2", "fsdp2-noreshard", "hsdp"):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        world = dist.get_world_size()
        if mode == "hsdp":  # (replicate, shard): shard within groups of consecutive ranks
            if shard_size <= 0 or world % shard_size:
                raise SystemExit(f"--shard-size {shard_size} must divide the world ({world})")
            mesh = init_device_mesh("cpu", (world // shard_size, shard_size),
                                    mesh_dim_names=("replicate", "shard"))
        else:
            mesh = init_device_mesh("cpu", (world,))
        reshard = mode != "fsdp2-noreshard"
        for block in model.blocks:  # the blocks are the units, as zerotorch's stage 3
            fully_shard(block, mesh=mesh, reshard_after_forward=reshard)
        fully_shard(model, mesh=mesh, reshard_after_forward=reshard)  # wte, wpe, ln_f
        return model, adamw_class(model.parameters(), **hyper)
    raise SystemExit(f"unknown --mode {mode}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--export-dir", required=True, help="the export directory of zt_bench_peers")
    ap.add_argument("--mode", required=True,
                    choices=["ddp", "zero", "fsdp2", "fsdp2-noreshard", "hsdp"])
    ap.add_argument("--shard-size", type=int, default=0,
                    help="hsdp: ranks per shard group (consecutive ranks; replicated across)")
    ap.add_argument("--link-counter", default="",
                    help="a byte counter file each node's local rank 0 reads around the timed "
                         "steps (bench/multinode); the row gets link_bytes_per_step")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--label", default="")
    ap.add_argument("--json", default="")
    ap.add_argument("--adamw", choices=["torch", "zt-math"], default="torch",
                    help="zt-math: diagnostic AdamW with zerotorch's rounding (AdamWZtMath)")
    ap.add_argument("--check-weights", action="store_true",
                    help="compare the loaded weights' checksum with the export's (slow at size)")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    baseline_rss = status_bytes("VmRSS:")
    with open(os.path.join(a.export_dir, "meta.json")) as f:
        meta = json.load(f)
    if meta["world_size"] != world:
        raise SystemExit(f"export made for {meta['world_size']} ranks, this job has {world}")
    batches = read_batches(os.path.join(a.export_dir, f"batches_r{rank}.bin"))
    model = Gpt(meta)
    load_initial_weights(model, a.export_dir, meta, a.check_weights)
    wrapped, optimizer = build(a.mode, model, meta, a.adamw, a.shard_size)
    reads_link = bool(a.link_counter) and int(os.environ.get("LOCAL_RANK", "0")) == 0

    def link_counter():
        with open(a.link_counter) as f:
            return float(f.read())
    link_start = 0.0

    losses, fwd, bwd, opt, step_ms = [], [], [], [], []
    timed_tokens, t_timed = 0.0, time.perf_counter()
    for i, (ids, am, labels) in enumerate(batches):
        if i == a.warmup:
            dist.barrier()
            t_timed = time.perf_counter()
            cpu_timed = time.process_time()
            if reads_link:
                link_start = link_counter()
        t0 = time.perf_counter()
        loss = Gpt.loss(wrapped(ids, am), labels)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)
        t3 = time.perf_counter()
        l = torch.tensor([loss.item(), float(am.sum())], dtype=torch.float64)
        dist.all_reduce(l)
        losses.append(l[0].item() / world)
        if i < a.warmup:
            continue
        timed_tokens += l[1].item()
        fwd.append((t1 - t0) * 1e3)
        bwd.append((t2 - t1) * 1e3)
        opt.append((t3 - t2) * 1e3)
        step_ms.append((t3 - t0) * 1e3)
    wall_s = time.perf_counter() - t_timed
    link_bytes = link_counter() - link_start if reads_link else 0.0
    cpu_ms = (time.process_time() - cpu_timed) * 1e3 / (len(batches) - a.warmup)

    def per_rank(value):
        out = [None] * world
        dist.all_gather_object(out, value)
        return out

    wall0 = per_rank(wall_s)[0]
    cpu = per_rank(cpu_ms)
    rss = per_rank(status_bytes("VmHWM:"))
    base = per_rank(baseline_rss)
    state = per_rank(model_state_bytes(wrapped, optimizer))
    link_total = sum(per_rank(link_bytes))
    if rank == 0:
        label = a.label or a.mode
        row = dict(impl="pytorch", config=label, mode=a.mode, adamw=a.adamw, backend="gloo",
                   ranks=world, threads_per_rank=a.threads, steps=len(batches),
                   warmup_steps=a.warmup,
                   timed_tokens=timed_tokens, wall_s=wall_s, tokens_per_s=timed_tokens / wall0,
                   forward_ms=statistics.median(fwd), backward_ms=statistics.median(bwd),
                   comm_wait_ms=None, optimizer_ms=statistics.median(opt),
                   step_ms=statistics.median(step_ms), cpu_ms_per_step_per_rank=cpu,
                   peak_rss_bytes=max(rss),
                   peak_rss_bytes_per_rank=rss, baseline_rss_bytes_per_rank=base,
                   model_state_bytes=state[0], model_state_bytes_per_rank=state,
                   losses=losses, torch_version=torch.__version__,
                   link_bytes_per_step=link_total / (len(batches) - a.warmup))
        if a.json:
            with open(a.json, "a") as f:
                f.write(json.dumps(row) + "\n")
        print(f"{label:22s} {row['tokens_per_s']:10.0f} tokens/s | fwd {row['forward_ms']:.1f} "
              f"bwd {row['backward_ms']:.1f} opt {row['optimizer_ms']:.1f} ms | peak RSS "
              f"{max(rss) / 2**20:.0f} MiB | state {state[0] / 2**20:.2f} MiB/rank | "
              f"last loss {losses[-1]:.6f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    # Leave without the interpreter's teardown: a PyTorch 2.11 worker on this machine now and
    # then aborts there ("terminate called without an active exception", a joinable thread
    # destroyed at exit; seen in CI after the row was written). Everything is written and
    # flushed at this point, so skipping the static destructors loses nothing.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
