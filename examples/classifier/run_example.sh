#!/usr/bin/env bash
# The classifier example end to end (examples/classifier/README.md): labels Debian's fortunes
# with their Flesch-Kincaid grade, pre-tokenizes them, and trains train_classifier with 2 ranks
# under ztrun three times from the same initial weights: smart batching, random batches with
# dynamic padding, random batches padded to data.max_length. Prints a table of time, tokens/s,
# padding fraction and validation RMSE. Needs a build (scripts/build.sh). Outputs in
# $ZT_BUILD_DIR/classifier_job/. ZT_CLASSIFIER_STEPS overrides the number of steps (300).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${ZT_BUILD_DIR:-$root/build}"
job="$build/classifier_job"
python="${ZT_VENV:-$HOME/.cache/zerotorch/venv-torch-2.11.0}/bin/python"
steps="${ZT_CLASSIFIER_STEPS:-300}"
corpora="$job/corpora"
mkdir -p "$corpora"
if [ ! -s "$corpora/fk_train.ztt" ]; then
  bash "$root/data/tools/make_corpora.sh" "$corpora"
  # shellcheck disable=SC2046  # one path per line, no spaces
  "$build/bin/zt-readability-corpus" --format fortune --input $(cat "$corpora/fortunes.list") \
    --output "$corpora/fk.jsonl" --min-words 3 --max-words 100
  "$build/bin/zt-pretokenize" --format jsonl --input "$corpora/fk.jsonl" \
    --label-fields grade_centi --model-type unigram --vocab-size 4000 --train-sentences 8000 \
    --train-model "$corpora/fk.model" --min-length 2 \
    --output "$corpora/fk_train.ztt" --valid-output "$corpora/fk_valid.ztt" --valid-fraction 0.05
fi
cd "$root"
for mode in smart random fixed; do
  "$build/bin/ztrun" --standalone --nproc-per-node 2 "$build/bin/train_classifier" \
    --config configs/classifier_zero2.yaml --train-shard "$corpora/fk_train.ztt" \
    --valid-shard "$corpora/fk_valid.ztt" --steps "$steps" --batching "$mode" \
    --out-dir "$job/$mode" --set scheduler.params.total_num_steps="$steps"
done
"$python" - "$job" <<'PY'
import json, sys
print(f"{'batching':<8} {'train s':>8} {'tok/s':>8} {'samples/s':>10} {'padding':>8} "
      f"{'RMSE before':>12} {'RMSE after':>11} {'mean pred.':>11}")
for mode in ("smart", "random", "fixed"):
    s = json.loads(open(f"{sys.argv[1]}/{mode}/summary.json").read())
    print(f"{mode:<8} {s['train_seconds']:>8.1f} {s['tokens_per_s']:>8.0f} "
          f"{s['samples_per_s']:>10.1f} {s['padding_fraction']:>8.3f} "
          f"{s['valid_rmse_before']:>12.2f} {s['valid_rmse_after']:>11.2f} "
          f"{s['valid_rmse_mean_predictor']:>11.2f}")
PY
