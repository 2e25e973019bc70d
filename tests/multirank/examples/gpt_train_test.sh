#!/usr/bin/env bash
# Runs train_gpt under ztrun (2 ranks) on the tiny shards of gpt_make_shard.sh and checks its
# metrics with check_gpt_metrics.py.
#   gpt_train_test.sh BIN_DIR WORK_DIR PYTHON NAME CONFIG STEPS MODE [--set k=v ...]
# MODE: "decreasing" (loss must fall, perplexity too) or "finite" (every loss finite).
set -euo pipefail
bin="$1"; work="$2"; python="$3"; name="$4"; config="$5"; steps="$6"; mode="$7"; shift 7
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$work/$name"
rm -rf "$out"
# Tiny sizes for every config; the config's own batch, precision, stage and optimizer stay.
"$bin/ztrun" --standalone --nproc-per-node 2 "$bin/train_gpt" --config "$config" \
  --train-shard "$work/tiny_train.ztt" --valid-shard "$work/tiny_valid.ztt" \
  --steps "$steps" --out-dir "$out" --checkpoint-dir "$out/checkpoints" \
  --sample-tokens 8 --sample-prompt "And the king" \
  --set model.n_layer=2 --set model.n_head=2 --set model.d_model=32 --set model.vocab_size=0 \
  --set model.max_seq_len=32 --set model.dropout=0 --set data.max_length=32 \
  --set steps_per_print=1 "$@"
"$python" "$here/check_gpt_metrics.py" "$out" "$steps" "$mode"
