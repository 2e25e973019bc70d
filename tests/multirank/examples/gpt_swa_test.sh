#!/usr/bin/env bash
# SWA end to end (optim/swa.h): train_gpt at ZeRO-3 with 2 ranks, fp32, the same 10-step run
# stopped after 8, 9 and 10 steps (one schedule), swa {enabled, swa_start: 7}: the 10-step
# checkpoint's average, exported with zt-export-hf --weights swa, must be the plain mean of the
# three runs' exported masters (each rank averaged its own shard; the checkpoint consolidates).
#   gpt_swa_test.sh BIN_DIR WORK_DIR PYTHON CONFIG
set -euo pipefail
bin="$1"; work="$2"; python="$3"; config="$4"
out="$work/swa"
rm -rf "$out"; mkdir -p "$out"
for steps in 8 9 10; do
  "$bin/ztrun" --standalone --nproc-per-node 2 "$bin/train_gpt" --config "$config" \
    --train-shard "$work/tiny_train.ztt" --steps "$steps" --out-dir "$out/s$steps" \
    --checkpoint-dir "$out/s$steps/ckpt" --sample-tokens 0 \
    --set model.n_layer=2 --set model.n_head=2 --set model.d_model=32 --set model.vocab_size=0 \
    --set model.max_seq_len=32 --set model.dropout=0 --set data.max_length=32 \
    --set data.max_tokens=512 --set bf16.enabled=false --set scheduler.params.total_num_steps=10 \
    --set scheduler.params.warmup_num_steps=1 --set swa.enabled=true --set swa.swa_start=7
  "$bin/zt-export-hf" "$out/s$steps/ckpt" "$out/s$steps/master"
done
"$bin/zt-export-hf" "$out/s10/ckpt" "$out/s10/swa" --weights swa
# A checkpoint without an average says so in one line.
if "$bin/zt-export-hf" "$out/s8/ckpt" "$out/bad" --weights bogus 2> "$out/bad.err"; then
  echo "zt-export-hf accepted --weights bogus"; exit 1
fi
grep -q "must be master or swa" "$out/bad.err"
# The one exporter finds the family itself; a family the checkpoint is not of is a one-line error.
for family in llama bert bogus; do
  if "$bin/zt-export-hf" "$out/s8/ckpt" "$out/bad" --family "$family" 2> "$out/bad.err"; then
    echo "zt-export-hf exported a GPT checkpoint as --family $family"; exit 1
  fi
  [ "$(wc -l < "$out/bad.err")" -eq 1 ] || { cat "$out/bad.err"; exit 1; }
done
"$python" - "$out" <<'PY'
import sys
from safetensors.torch import load_file
out = sys.argv[1]
m = [load_file(f"{out}/s{s}/master/model.safetensors") for s in (8, 9, 10)]
swa = load_file(f"{out}/s10/swa/model.safetensors")
worst, moved = 0.0, 0.0
for k, v in swa.items():
    mean = (m[0][k] + m[1][k] + m[2][k]) / 3
    worst = max(worst, (v - mean).abs().max().item())
    moved = max(moved, (m[2][k] - m[0][k]).abs().max().item())
print(f"SWA average vs mean of the masters after steps 8, 9, 10: max |diff| {worst:.3g} "
      f"(the masters moved by up to {moved:.3g} over those steps)")
assert moved > 1e-3, "the masters did not move: the check would prove nothing"
assert worst <= 1e-6, worst
PY
