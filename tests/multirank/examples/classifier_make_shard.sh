#!/usr/bin/env bash
# Test fixture of the classifier tests: a few of Debian's fortune files (package `fortunes`,
# installed by scripts/setup.sh) labelled with their Flesch-Kincaid grade by
# zt-readability-corpus, pre-tokenized into train/valid shards with the label grade_centi.
#   classifier_make_shard.sh BIN_DIR WORK_DIR  ->  WORK_DIR/fk_{train,valid}.ztt
# Exits 77 (ctest: skipped) when the fortune files are missing.
set -euo pipefail
bin="$1"; work="$2"
dir=/usr/share/games/fortunes
files=()
for f in fortunes wisdom platitudes literature; do
  if [ -f "$dir/$f.u8" ]; then files+=("$dir/$f.u8"); elif [ -f "$dir/$f" ]; then files+=("$dir/$f"); fi
done
if [ ${#files[@]} -lt 2 ]; then
  echo "fortune files missing in $dir (apt-get install fortunes); skipping" >&2
  exit 77
fi
rm -rf "$work"; mkdir -p "$work"
"$bin/zt-readability-corpus" --format fortune --input "${files[@]}" --output "$work/fk.jsonl" \
  --min-words 3 --max-words 60
"$bin/zt-pretokenize" --format jsonl --input "$work/fk.jsonl" --label-fields grade_centi \
  --model-type bpe --vocab-size 256 --train-model "$work/fk.model" --min-length 2 \
  --output "$work/fk_train.ztt" --valid-output "$work/fk_valid.ztt" --valid-fraction 0.1
test -s "$work/fk_train.ztt" && test -s "$work/fk_valid.ztt"
