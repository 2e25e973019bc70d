#!/usr/bin/env bash
# The BERT example and Hugging Face, both ways, against transformers in the project's virtualenv
# (check_hf_bert.py), for one model_type (bert or roberta):
#   1. a random tiny *ForSequenceClassification -> save_pretrained, one file and sharded with an
#      index -> C++ import (zt_bert_logits): logits within 1e-4 of transformers';
#      The same encoder saved without the task head (base model, *ForMaskedLM) loads with the
#      head new, as from_pretrained does;
#   2. train_bert --init-from the sharded directory: 5 steps, 2 ranks, ZeRO-3, fp32, activation
#      checkpointing from the config's model block (every layer call of a step checkpointed),
#      with the per-step losses of the same run without checkpointing (within 1e-5), and the
#      validation loss before training of the same import whole at stage 0;
#   3. zt-export-hf -> from_pretrained: logits within 1e-4 of the C++ model's (its
#      checkpoint, consolidated), and the weights and logits moved from the imported ones.
#   bert_hf_roundtrip_test.sh BIN_DIR WORK_DIR PYTHON CONFIG MODEL_TYPE
set -euo pipefail
bin="$1"; work="$2"; python="$3"; config="$4"; type="$5"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$work/roundtrip_$type"
rm -rf "$out"; mkdir -p "$out"
# Every step takes seconds: one still running after 150 s is stuck, and run_bounded.sh shows where.
bounded="bash $here/../../support/run_bounded.sh 150"
check="$bounded $python $here/check_hf_bert.py"
max_len=32
positions=$max_len; [ "$type" = roberta ] && positions=$((max_len + 2))
# Each Python start imports torch and transformers (seconds): the checks are collected in
# `checks` and run in one process at the end (check_hf_bert.py takes commands separated by "+").
checks=()
later() { checks+=(+ "$@"); }
# 1: import. The shard's tokenizer has 256 ids; the model's vocabulary is larger. Pre-trained
# directories without the task head (made here, checked below): the head is new, the
# pre-training head and (RoBERTa) the pooler are not loaded, the base model's unprefixed names
# are found.
$check make "$type" "$out/in" "$out/in_sharded" 300 "$positions" \
  + inputs "$out/in" "$out/inputs.safetensors" "$max_len" \
  + pretrained "$out/in" "$out/base" "$out/mlm"
for d in in in_sharded; do
  $bounded "$bin/zt_bert_logits" "$out/$d" "$out/inputs.safetensors" "$out/$d.logits.safetensors"
  later logits "$out/$d" "$out/inputs.safetensors" "$out/$d.logits.safetensors"
done
expect_new() {  # expect_new DIR NEW...
  local dir="$1"; shift
  $bounded "$bin/zt_bert_logits" "$out/$dir" "$out/inputs.safetensors" "$out/$dir.logits" \
    > "$out/$dir.log"
  cat "$out/$dir.log"
  local names; names="$(echo "$@" | sed 's/ /, /g')"
  grep -q "; new $# ($names)" "$out/$dir.log" || { echo "$dir: not new: $names"; exit 1; }
}
if [ "$type" = bert ]; then
  expect_new base classifier.weight classifier.bias
  expect_new mlm bert.pooler.dense.weight bert.pooler.dense.bias classifier.weight classifier.bias
else
  for d in base mlm; do
    expect_new $d classifier.dense.weight classifier.dense.bias classifier.out_proj.weight \
      classifier.out_proj.bias
  done
fi
# 2: train, with activation checkpointing (the config's) and, to compare losses, without.
train() {  # train NAME [args...]: its output in NAME.log, and on the terminal when it fails
  local name="$1"; shift
  $bounded "$bin/ztrun" --standalone --nproc-per-node 2 "$bin/train_bert" --config "$config" \
    --init-from "$out/in_sharded" --train-shard "$work/shard/fk_train.ztt" \
    --valid-shard "$work/shard/fk_valid.ztt" --steps 5 --out-dir "$out/$name" \
    --checkpoint-dir "$out/$name/ckpt" --set data.max_length=$max_len \
    --set optimizer.params.lr=1e-3 --set scheduler.params.total_num_steps=5 \
    --set scheduler.params.warmup_num_steps=1 --set steps_per_print=1 "$@" \
    > "$out/$name.log" 2>&1 || { cat "$out/$name.log"; echo "train $name failed"; exit 1; }
}
train train
cat "$out/train.log"
train plain --set model.activation_checkpointing=false
# The same import whole at stage 0: every rank of the stage-3 run read its own shards' values, so
# the validation loss before training is the same.
train z0 --set zero_optimization.stage=0 --set model.activation_checkpointing=false
# On the test device (ZT_TEST_DEVICE, set where it is built): the same stage-3 run, the same
# losses (the device runs the CPU's kernels on the same operands: only their order of operations
# may differ).
if [ -n "${ZT_TEST_DEVICE:-}" ] && [ "$type" = bert ]; then
  train device --device "$ZT_TEST_DEVICE"
  "$python" "$here/same_losses.py" "$out/train" "$out/device" 1e-5 "$out/device.log" \
    "$ZT_TEST_DEVICE"
fi
"$python" - "$out"/{train,z0} <<'PY'
import json, sys
a, b = (json.load(open(f"{d}/summary.json"))["valid_loss_before"] for d in sys.argv[1:])
print("validation loss before training, stage 3 vs stage 0:", a, b)
assert abs(a - b) <= 1e-6 * abs(b), (a, b)
PY
grep -q "init from .*in_sharded (Hugging Face $type): loaded .* into this rank's shards; new 0" \
  "$out/train.log" || { echo "no stage-3 load report"; exit 1; }
"$python" - "$out"/{train,plain} <<'PY'
import json, math, sys
s = json.load(open(f"{sys.argv[1]}/summary.json"))
print("checkpointed layer calls in the last step:", s["checkpointed_layer_calls"],
      "| validation loss", s["valid_loss_before"], "->", s["valid_loss_after"])
assert s["checkpointed_layer_calls"] == 2, s  # both layers of the last forward
assert s["world_size"] == 2, s
assert json.load(open(f"{sys.argv[2]}/summary.json"))["checkpointed_layer_calls"] == 0
assert math.isfinite(s["valid_loss_after"]) and s["valid_loss_after"] != s["valid_loss_before"], s
a, b = ([json.loads(line)["loss"] for line in open(f"{d}/metrics.jsonl")] for d in sys.argv[1:])
assert len(a) == 5 and all(abs(x - y) <= 1e-5 * abs(x) for x, y in zip(a, b)), (a, b)
print("losses with and without activation checkpointing agree:", a)
PY
# 3: export, reload.
$bounded "$bin/zt-export-hf" "$out/train/ckpt" "$out/hf"
$bounded "$bin/zt_bert_logits" "$out/train/ckpt" "$out/inputs.safetensors" \
  "$out/trained.logits.safetensors"
later logits "$out/hf" "$out/inputs.safetensors" "$out/trained.logits.safetensors"
later moved "$out/in" "$out/hf" "$out/inputs.safetensors"
$check "${checks[@]:1}"
