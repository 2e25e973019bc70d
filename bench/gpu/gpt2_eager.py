"""The plain PyTorch baselines of bench/gpu_check.sh: GPT-2 124M, the same architecture as
models/gpt (pre-LayerNorm blocks, one qkv projection, exact GELU, tied head, causal SDPA), the
same shapes and random tokens, trained by eager PyTorch with torch.optim.AdamW(fused=True) and
autocast (bf16, or fp16 with a GradScaler): what a user writes without a framework. With
--compile the model is wrapped in torch.compile (inductor, default mode), the step otherwise the
same: what a user who wants speed writes. Its warm-up steps include the compilation.
--tiny --device cpu runs a 2-layer model on the host, to try the script without a GPU.

Prints one JSON line with the fields of zt-gpu-bench (and appends it to --json FILE).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from timed_row import emit, parser, row, timed


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        heads = lambda y: y.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        y = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class Gpt(nn.Module):
    def __init__(self, layers=12, heads=12, d=768, vocab=50257, ctx=1024):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        # models/gpt's initialisation: N(0, 0.02), zero biases, residual projections scaled.
        for name, p in self.named_parameters():
            if "ln" in name:
                continue
            if name.endswith(".bias"):
                nn.init.zeros_(p)
            elif name.endswith("proj.weight") or name.endswith("out.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * layers))
            else:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        for block in self.blocks:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)


def main():
    ap = parser()
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    a = ap.parse_args()

    torch.manual_seed(0)
    cuda = a.device == "cuda"
    dev = torch.device("cuda", 0) if cuda else torch.device("cpu")
    vocab = 512 if a.tiny else 50257
    model = (Gpt(layers=2, heads=2, d=64, vocab=vocab, ctx=a.seq) if a.tiny else Gpt()).to(dev)
    params = sum(p.numel() for p in model.parameters())
    decay = [p for n, p in model.named_parameters() if "bias" not in n and "ln" not in n]
    plain = [p for n, p in model.named_parameters() if "bias" in n or "ln" in n]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": plain, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), fused=True)
    amp_dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float16
    scaler = torch.amp.GradScaler(a.device, enabled=a.dtype == "fp16", init_scale=2.0**16)
    tokens = torch.randint(0, vocab, (a.batch, a.seq + 1), device=dev)
    inp, labels = tokens[:, :-1], tokens[:, 1:]
    forward = torch.compile(model) if a.compile else model

    def step():
        with torch.autocast(a.device, dtype=amp_dtype):
            logits = forward(inp)
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1))
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        return loss

    seconds, loss = timed(step, a.warmup, a.steps, dev)
    kind = "compile" if a.compile else "eager"
    emit(row(a, dev, params, seconds,
             name=f"{kind} {a.dtype} (autocast, fused AdamW"
                  f"{', torch.compile' if a.compile else ''})",
             impl=f"pytorch-{kind}", stage=None, offload=False, final_loss=loss.item()), a.json)


if __name__ == "__main__":
    main()
