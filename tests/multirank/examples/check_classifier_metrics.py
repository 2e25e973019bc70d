"""Checks train_classifier's output folder: metrics.jsonl has one well-formed object per step,
summary.json its fields.

    check_classifier_metrics.py OUT_DIR STEPS decreasing|finite
"decreasing": the mean loss of the last quarter of the steps is below that of the first quarter
and the validation RMSE after training is below the one before. "finite": every loss is finite.
"""
import json
import math
import sys

out, steps, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
required = ["step", "loss", "lr", "tokens_per_s", "samples_per_s", "padding_fraction",
            "loss_scale", "model_state_bytes_per_rank", "step_seconds"]
rows = []
with open(f"{out}/metrics.jsonl") as f:
    for n, line in enumerate(f, 1):
        row = json.loads(line)
        for key in required:
            assert key in row, f"metrics.jsonl line {n}: no '{key}'"
        assert row["step"] == n, f"metrics.jsonl line {n}: step {row['step']}"
        assert 0 <= row["padding_fraction"] < 1, f"line {n}: padding {row['padding_fraction']}"
        assert row["tokens_per_s"] > 0 and row["samples_per_s"] > 0, f"line {n}: {row}"
        rows.append(row)
assert len(rows) == steps, f"metrics.jsonl: {len(rows)} steps, expected {steps}"
losses = [r["loss"] for r in rows]
assert all(isinstance(x, float) and math.isfinite(x) for x in losses), f"non-finite loss: {losses}"
with open(f"{out}/summary.json") as f:
    summary = json.loads(f.read())
before, after = summary["valid_rmse_before"], summary["valid_rmse_after"]
assert before is not None and after is not None, f"summary.json: RMSE missing: {summary}"
q = max(1, steps // 4)
first, last = sum(losses[:q]) / q, sum(losses[-q:]) / q
print(f"{out}: {steps} steps, loss {losses[0]:.3f} -> {losses[-1]:.3f} (first quarter "
      f"{first:.3f}, last {last:.3f}), valid RMSE {before:.2f} -> {after:.2f} grades (mean "
      f"predictor {summary['valid_rmse_mean_predictor']:.2f}), padding "
      f"{summary['padding_fraction']:.3f}, {summary['tokens_per_s']:.0f} tok/s")
if mode == "decreasing":
    assert last < first, f"loss did not decrease: first quarter {first}, last quarter {last}"
    assert after < before, f"validation RMSE did not fall: {before} -> {after}"
