#!/usr/bin/env bash
# Pretrain -> fine-tune: train_gpt (2 ranks, ZeRO-3) pre-trains a tiny GPT on the classifier's
# texts; train_classifier (1 rank, ZeRO-2: another world size and stage) starts its trunk from
# that checkpoint, and from its Hugging Face export, by name:
#   - the report names 16 loaded parameters, the head as new, nothing skipped;
#   - both starts give the same first loss and validation RMSE before training (same weights),
#     and not the from-scratch ones;
#   - a shape mismatch (d_model) and a missing name (one more layer) stop it with one line;
#   - with swa on, the averaged weights' validation RMSE is reported; bad swa keys are errors.
#   classifier_pretrained_test.sh BIN_DIR WORK_DIR PYTHON GPT_CONFIG CLASSIFIER_CONFIG
set -euo pipefail
bin="$1"; work="$2"; python="$3"; gpt_config="$4"; config="$5"
out="$work/pretrained"
rm -rf "$out"; mkdir -p "$out"
shape=(--set model.n_layer=1 --set model.n_head=2 --set model.d_model=32 --set model.max_seq_len=64
       --set data.max_length=64)
"$bin/ztrun" --standalone --nproc-per-node 2 "$bin/train_gpt" --config "$gpt_config" \
  --train-shard "$work/fk_train.ztt" --steps 10 --out-dir "$out/gpt" \
  --checkpoint-dir "$out/gpt/ckpt" --sample-tokens 0 "${shape[@]}" --set model.vocab_size=0 \
  --set data.max_tokens=512 --set model.dropout=0 --set scheduler.params.total_num_steps=10
"$bin/zt-export-hf" "$out/gpt/ckpt" "$out/gpt/hf"
classify() {  # classify NAME [args...]
  local name="$1"; shift
  "$bin/ztrun" --standalone --nproc-per-node 1 "$bin/train_classifier" --config "$config" \
    --train-shard "$work/fk_train.ztt" --valid-shard "$work/fk_valid.ztt" --steps 5 \
    --out-dir "$out/$name" "${shape[@]}" --set train_micro_batch_size_per_gpu=16 \
    --set bf16.enabled=false --set steps_per_print=1 "$@" > "$out/$name.log" 2>&1
}
classify scratch
classify ckpt --init-from "$out/gpt/ckpt"
classify hf --init-from "$out/gpt/hf" --set swa.enabled=true --set swa.swa_start=2
for name in ckpt hf; do
  grep -q "trunk from .*: loaded 16 parameters, new 2 (head.weight, head.bias), skipped 0" \
    "$out/$name.log" || { echo "no load report in $out/$name.log"; cat "$out/$name.log"; exit 1; }
done
expect_error() {  # expect_error NAME PATTERN [args...]
  local name="$1" pattern="$2"; shift 2
  if classify "$name" "$@"; then echo "$name: train_classifier accepted it"; exit 1; fi
  grep -q "$pattern" "$out/$name.log" || { echo "$name: no '$pattern'"; cat "$out/$name.log"; exit 1; }
}
expect_error bad_shape "is \[256, 64\] in the model, pretrained 'wte.weight' is \[256, 32\]\|trunk.wte.weight is" \
  --init-from "$out/gpt/ckpt" --set model.d_model=64
expect_error missing "trunk.blocks.1.ln1.weight has no pretrained value" \
  --init-from "$out/gpt/ckpt" --set model.n_layer=2
expect_error bad_swa "swa.swa_freq: must be >= 1" --set swa.enabled=true --set swa.swa_freq=0
expect_error swa_typo "swa.swa_star: unknown key" --set swa.swa_star=3
"$python" - "$out" <<'PY'
import json, math, sys
out = sys.argv[1]
s = {n: json.load(open(f"{out}/{n}/summary.json")) for n in ("scratch", "ckpt", "hf")}
first = {n: json.loads(open(f"{out}/{n}/metrics.jsonl").readline())["loss"] for n in s}
print("first loss:", first, "RMSE before:", {n: s[n]["valid_rmse_before"] for n in s})
assert first["ckpt"] == first["hf"], first
assert s["ckpt"]["valid_rmse_before"] == s["hf"]["valid_rmse_before"]
assert first["ckpt"] != first["scratch"], first
assert math.isfinite(s["hf"]["valid_rmse_swa"]), s["hf"]
assert s["hf"]["valid_rmse_swa"] != s["hf"]["valid_rmse_after"], s["hf"]
print("SWA RMSE", s["hf"]["valid_rmse_swa"], "last weights", s["hf"]["valid_rmse_after"])
PY
