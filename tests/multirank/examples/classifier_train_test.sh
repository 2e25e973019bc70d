#!/usr/bin/env bash
# Runs train_classifier under ztrun (2 ranks) on the shards of classifier_make_shard.sh at tiny
# sizes and checks its output with check_classifier_metrics.py.
#   classifier_train_test.sh BIN_DIR WORK_DIR PYTHON NAME CONFIG STEPS MODE [args ...]
# MODE: decreasing (loss and validation RMSE must fall) or finite. Extra args go to
# train_classifier (--batching, --set k=v).
set -euo pipefail
bin="$1"; work="$2"; python="$3"; name="$4"; config="$5"; steps="$6"; mode="$7"; shift 7
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$work/$name"
rm -rf "$out"
"$bin/ztrun" --standalone --nproc-per-node 2 "$bin/train_classifier" --config "$config" \
  --train-shard "$work/fk_train.ztt" --valid-shard "$work/fk_valid.ztt" --steps "$steps" \
  --out-dir "$out" --set model.n_layer=1 --set model.n_head=2 --set model.d_model=32 \
  --set model.max_seq_len=64 --set data.max_length=64 --set train_micro_batch_size_per_gpu=16 \
  --set steps_per_print=5 "$@"
"$python" "$here/check_classifier_metrics.py" "$out" "$steps" "$mode"
