#!/usr/bin/env bash
# The main job (examples/gpt/README.md): sets up and builds zerotorch, pre-tokenizes the King
# James Bible (Debian's bible-kjv) with a small SentencePiece model, trains the GPT example on
# CPU with 2 ranks under ztrun (ZeRO stage 3, bf16, length-bucketed batches, gradient
# accumulation 2), then plots the loss curve. Outputs in $ZT_BUILD_DIR/main_job/ (gitignored).
# ZT_MAIN_STEPS overrides the number of optimizer steps; ZT_SKIP_BUILD=1 uses the build as it is
# (the ctest entry examples.main_job runs this script that way).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ZT_BUILD_DIR:-$root/build}"
job="$build/main_job"
python="${ZT_VENV:-$HOME/.cache/zerotorch/venv-torch-2.11.0}/bin/python"
if [ "${ZT_SKIP_BUILD:-0}" != "1" ]; then
  bash "$root/scripts/build.sh"
fi
start=$(date +%s)

corpora="$job/corpora"
mkdir -p "$corpora"
if [ ! -s "$corpora/kjv_train.ztt" ]; then
  bash "$root/data/tools/make_corpora.sh" "$corpora"
  "$build/bin/zt-pretokenize" --input "$corpora/kjv.txt" --model-type unigram --vocab-size 4000 \
    --train-sentences 10000 --train-model "$corpora/kjv.model" --add-eos --min-length 2 \
    --output "$corpora/kjv_train.ztt" --valid-output "$corpora/kjv_valid.ztt" --valid-fraction 0.01
fi

cd "$root"
"$build/bin/ztrun" --standalone --nproc-per-node 2 "$build/bin/train_gpt" \
  --config configs/gpt_small_zero3.yaml \
  --train-shard "$corpora/kjv_train.ztt" --valid-shard "$corpora/kjv_valid.ztt" \
  --steps "${ZT_MAIN_STEPS:-120}" --out-dir "$job" --checkpoint-dir "$job/checkpoints" --fresh \
  --sample-prompt "And God said" --sample-tokens 32 --top-k 1
"$python" "$root/examples/gpt/plot_metrics.py" "$job/metrics.jsonl" "$job/loss.png"
echo "[main] done in $(( $(date +%s) - start )) s after the build; outputs in $job"
