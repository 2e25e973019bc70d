#!/usr/bin/env bash
# Test fixture: the tiny corpus (gpt_tiny_corpus.sh) pre-tokenized into train/valid shards.
#   gpt_make_shard.sh BIN_DIR WORK_DIR  ->  WORK_DIR/tiny_{train,valid}.ztt, WORK_DIR/tiny.model
set -euo pipefail
bin="$1"; work="$2"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
rm -rf "$work"; mkdir -p "$work"
bash "$here/gpt_tiny_corpus.sh" "$work/tiny.txt"
"$bin/zt-pretokenize" --input "$work/tiny.txt" --model-type bpe --vocab-size 128 \
  --train-model "$work/tiny.model" --add-eos --min-length 2 \
  --output "$work/tiny_train.ztt" --valid-output "$work/tiny_valid.ztt" --valid-fraction 0.05
test -s "$work/tiny_train.ztt" && test -s "$work/tiny_valid.ztt"
