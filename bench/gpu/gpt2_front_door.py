"""The Python front door's row of bench/gpu_check.sh: what a DeepSpeed user with a Hugging Face
model runs. A transformers GPT2LMHeadModel of GPT-2 124M's shape (12 layers, width 768, 12 heads,
vocabulary 50257, context 1024, tied head, SDPA attention, dropout off as in the other rows),
wrapped in torch.compile (inductor; --eager leaves it out), handed to ``zerotorch.initialize``
with a DeepSpeed config (bf16 or fp16, ZeRO --stage, optionally the optimizer offloaded to the
host, AdamW as the other rows set it), then ``engine(...)``, ``engine.backward``,
``engine.step`` on the same random tokens as bench/gpu/gpt2_eager.py. The warm-up steps include
the compilation.

Prints one JSON line with the fields of zt-gpu-bench (and appends it to --json FILE). A run whose
loss is not finite, or that took no optimizer step, prints its row with "ok": false and exits 1.
--tiny --device cpu runs a 2-layer model on the host, to try the script without a GPU.

Needs PYTHONPATH to hold the build's python/ folder (bench/gpu_check.sh sets it) and
transformers.
"""
import math

import torch
import transformers

import zerotorch
from timed_row import emit, parser, row, timed


def main():
    ap = parser()
    ap.add_argument("--stage", type=int, default=2, choices=[0, 1, 2, 3])
    ap.add_argument("--offload", action="store_true", help="offload_optimizer: cpu")
    ap.add_argument("--eager", action="store_true", help="no torch.compile")
    a = ap.parse_args()

    torch.manual_seed(0)
    shape = dict(n_layer=2, n_embd=64, n_head=2, vocab_size=512) if a.tiny else dict(
        n_layer=12, n_embd=768, n_head=12, vocab_size=50257)
    cfg = transformers.GPT2Config(n_positions=max(a.seq, 1024), resid_pdrop=0.0, embd_pdrop=0.0,
                                  attn_pdrop=0.0, attn_implementation="sdpa", **shape)
    model = transformers.GPT2LMHeadModel(cfg)
    params = sum(p.numel() for p in model.parameters())
    zero = {"stage": a.stage}
    if a.offload:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    config = {
        "train_micro_batch_size_per_gpu": a.batch, "gradient_accumulation_steps": 1,
        "steps_per_print": 10**9, a.dtype: {"enabled": True}, "zero_optimization": zero,
        "optimizer": {"type": "AdamW",
                      "params": {"lr": 3e-4, "betas": [0.9, 0.95], "weight_decay": 0.1}},
    }
    given = model if a.eager else torch.compile(model)
    engine, _, _, _ = zerotorch.initialize(model=given, config=config, device=a.device)
    dev = engine.device
    tokens = torch.randint(0, cfg.vocab_size, (a.batch, a.seq), device=dev)
    nonfinite = torch.zeros((), dtype=torch.int64, device=dev)

    def step():
        # transformers shifts the labels itself: seq - 1 predicted tokens a row.
        loss = engine(input_ids=tokens, labels=tokens).loss
        engine.backward(loss)
        engine.step()
        nonfinite.add_(torch.isfinite(loss.detach()).logical_not().to(torch.int64))
        return loss

    seconds, loss = timed(step, a.warmup, a.steps, dev)
    final_loss = loss.item()
    bad = int(nonfinite.item())
    skipped = int(engine.skipped_steps)
    error = ""
    if bad:
        error = f"{bad} of {a.warmup + a.steps} steps had a non-finite loss"
    elif skipped >= a.warmup + a.steps:
        error = "no optimizer step was taken (every step skipped by the loss scaler)"
    kind = "eager" if a.eager else "compiled"
    r = row(a, dev, params, seconds,
            name=f"zerotorch python {a.dtype} stage {a.stage}"
                 f"{' + offload' if a.offload else ''} ({kind} transformers)",
            impl="zerotorch-python", compiled=not a.eager, stage=a.stage, offload=a.offload,
            final_loss=final_loss if math.isfinite(final_loss) else None,
            skipped_steps=skipped, ok=not error)
    if error:
        r["error"] = error
    emit(r, a.json)
    engine.destroy()
    return 1 if error else 0


if __name__ == "__main__":
    raise SystemExit(main())
