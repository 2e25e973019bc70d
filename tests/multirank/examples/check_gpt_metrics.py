"""Checks train_gpt's output folder: metrics.jsonl has one well-formed object per step (step,
loss, lr, tokens_per_s, loss_scale, model_state_bytes_per_rank), and summary.json its fields.

    check_gpt_metrics.py OUT_DIR STEPS decreasing|finite
"decreasing": the mean loss of the last quarter of the steps is below that of the first quarter,
and validation perplexity after training is below the one before. "finite": every loss is finite.
"""
import json
import math
import sys

out, steps, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
required = ["step", "loss", "lr", "tokens_per_s", "loss_scale", "model_state_bytes_per_rank"]
rows = []
with open(f"{out}/metrics.jsonl") as f:
    for n, line in enumerate(f, 1):
        row = json.loads(line)
        for key in required:
            assert key in row, f"metrics.jsonl line {n}: no '{key}'"
        assert row["step"] == n, f"metrics.jsonl line {n}: step {row['step']}"
        rows.append(row)
assert len(rows) == steps, f"metrics.jsonl: {len(rows)} steps, expected {steps}"
losses = [r["loss"] for r in rows]
assert all(isinstance(x, float) and math.isfinite(x) for x in losses), f"non-finite loss: {losses}"
assert all(r["tokens_per_s"] > 0 and r["model_state_bytes_per_rank"] > 0 for r in rows)
with open(f"{out}/summary.json") as f:
    summary = json.loads(f.read())
before, after = summary["valid_ppl_before"], summary["valid_ppl_after"]
assert before is not None and after is not None, f"summary.json: perplexity missing: {summary}"
q = max(1, steps // 4)
first, last = sum(losses[:q]) / q, sum(losses[-q:]) / q
print(f"{out}: {steps} steps, loss {losses[0]:.3f} -> {losses[-1]:.3f} "
      f"(first quarter {first:.3f}, last {last:.3f}), valid ppl {before:.1f} -> {after:.1f}")
if mode == "decreasing":
    assert last < first, f"loss did not decrease: first quarter {first}, last quarter {last}"
    assert after < before, f"validation perplexity did not fall: {before} -> {after}"
