"""Plots train_gpt's loss curves (training, and validation where metrics.jsonl has valid_loss from
--eval-interval) and tokens/s from its metrics.jsonl into a PNG.

    plot_metrics.py METRICS.jsonl OUT.png
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")  # no display on CI machines
import matplotlib.pyplot as plt

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
steps = [r["step"] for r in rows]
fig, (ax_loss, ax_tps) = plt.subplots(1, 2, figsize=(10, 4))
ax_loss.plot(steps, [r["loss"] for r in rows], label="training")
valid = [(r["step"], r["valid_loss"]) for r in rows if r.get("valid_loss") is not None]
if valid:
    ax_loss.plot([s for s, _ in valid], [v for _, v in valid], "o-", label="validation")
ax_loss.legend()
ax_loss.set_xlabel("step")
ax_loss.set_ylabel("loss per token (mean over ranks)")
ax_loss.set_yscale("log")
ax_tps.plot(steps, [r["tokens_per_s"] for r in rows])
ax_tps.set_xlabel("step")
ax_tps.set_ylabel("tokens / s (all ranks)")
title = f"train_gpt: {len(rows)} steps, loss {rows[0]['loss']:.2f} -> {rows[-1]['loss']:.2f}"
if valid:
    title += f", validation {valid[-1][1]:.2f}"
fig.suptitle(title)
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=100)
print(f"wrote {sys.argv[2]}")
