"""Plots train_gpt's loss curve (and tokens/s) from its metrics.jsonl into a PNG.

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
ax_loss.plot(steps, [r["loss"] for r in rows])
ax_loss.set_xlabel("step")
ax_loss.set_ylabel("training loss (mean over ranks)")
ax_loss.set_yscale("log")
ax_tps.plot(steps, [r["tokens_per_s"] for r in rows])
ax_tps.set_xlabel("step")
ax_tps.set_ylabel("tokens / s (all ranks)")
fig.suptitle(f"train_gpt: {len(rows)} steps, loss {rows[0]['loss']:.2f} -> {rows[-1]['loss']:.2f}")
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=100)
print(f"wrote {sys.argv[2]}")
