#!/usr/bin/env bash
# The GPT example and Hugging Face GPT-2 (models/gpt/hf_gpt2.h), both ways, against
# transformers' GPT2LMHeadModel in the project's virtualenv:
#   A. train_gpt (2 ranks, ZeRO-3, fp32, gelu_new) -> checkpoint -> zt-export-hf ->
#      GPT2LMHeadModel.from_pretrained: logits within 1e-4 of the C++ model's on a batch;
#   B. a random GPT2LMHeadModel -> save_pretrained (whole, and sharded with an index) -> C++
#      import (logits within 1e-4) -> train_gpt --init-from it, 5 steps -> zt-export-hf ->
#      from_pretrained: its validation loss before and after must be the C++ run's logged ones,
#      and must have moved;
#   C. the same import trained on 2 ranks at ZeRO-3 (each rank reading its shards' ranges) and at
#      stage 0 (whole): the same weights.
#   gpt_hf_roundtrip_test.sh BIN_DIR WORK_DIR PYTHON CONFIG
set -euo pipefail
bin="$1"; work="$2"; python="$3"; config="$4"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$work/hf_roundtrip"
rm -rf "$out"; mkdir -p "$out"
check="$python $here/check_hf_gpt2.py"
train() {  # train() NPROC NAME STEPS [args...]
  local np="$1" name="$2" steps="$3"; shift 3
  "$bin/ztrun" --standalone --nproc-per-node "$np" "$bin/train_gpt" --config "$config" \
    --train-shard "$work/tiny_train.ztt" --valid-shard "$work/tiny_valid.ztt" \
    --steps "$steps" --out-dir "$out/$name" --checkpoint-dir "$out/$name/ckpt" --sample-tokens 0 \
    --set model.n_layer=2 --set model.n_head=2 --set model.d_model=32 --set model.vocab_size=0 \
    --set model.max_seq_len=32 --set model.dropout=0 --set model.activation=gelu_new \
    --set data.max_length=32 --set data.max_tokens=512 --set bf16.enabled=false \
    --set scheduler.params.total_num_steps="$steps" --set scheduler.params.warmup_num_steps=1 \
    --set steps_per_print=1 "$@"
}
# Each Python start imports torch and transformers (seconds): the checks are collected in
# `checks` and run in one process at the end (check_hf_gpt2.py takes commands separated by "+").
checks=()
later() { checks+=(+ "$@"); }
$check ids "$out/ids.safetensors" 128 32 + make "$out/b_in" "$out/b_in_sharded" 128 32
# A: export a trained ZeRO-3 checkpoint of 2 ranks.
train 2 a 10
"$bin/zt-export-hf" "$out/a/ckpt" "$out/a/hf"
"$bin/zt_gpt_logits" "$out/a/ckpt" "$out/ids.safetensors" "$out/a/logits.safetensors"
later logits "$out/a/hf" "$out/ids.safetensors" "$out/a/logits.safetensors"
# B: import a random GPT2LMHeadModel, train, export, reload.
for d in b_in b_in_sharded; do
  "$bin/zt_gpt_logits" "$out/$d" "$out/ids.safetensors" "$out/$d.logits.safetensors"
  later logits "$out/$d" "$out/ids.safetensors" "$out/$d.logits.safetensors" --sensitive
done
train 1 b 5 --init-from "$out/b_in_sharded"
"$bin/zt-export-hf" "$out/b/ckpt" "$out/b/hf"
later moved "$out/b_in" "$out/b/hf" "$work/tiny_valid.ztt" 32 "$out/b/summary.json"
# C: the import on 2 ranks, into ZeRO-3 shards (every rank its own ranges) and whole at stage 0:
# the same 5 steps give the same weights. Within 1e-3: the two sum gradients in other orders, and
# Adam's normalised step turns a near-zero gradient's rounding into up to lr (3e-3) per step; a
# rank that missed its shards' values would be off by the init scale (0.3).
train 2 c3 5 --init-from "$out/b_in_sharded"
train 2 c0 5 --init-from "$out/b_in_sharded" --set zero_optimization.stage=0
"$bin/zt-export-hf" "$out/c3/ckpt" "$out/c3/hf"
"$bin/zt-export-hf" "$out/c0/ckpt" "$out/c0/hf"
later same "$out/c0/hf" "$out/c3/hf" 1e-3
$check "${checks[@]:1}"
