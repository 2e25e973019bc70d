#!/usr/bin/env bash
# The main job (examples/gpt/README.md): sets up and builds zerotorch, pre-tokenizes the King
# James Bible (Debian's bible-kjv) with a small SentencePiece model (unigram, vocabulary 4000),
# trains the GPT example (configs/gpt_main.yaml: 4 layers, d_model 256) on CPU with 2 ranks under
# ztrun (ZeRO stage 3, bf16, length-bucketed batches, gradient accumulation 2), 800 steps,
# validating every 100, prints samples from a few prompts (top-k 40, temperature 0.8), then plots training
# and validation loss. Outputs in $ZT_BUILD_DIR/main_job/ (gitignored).
# ZT_MAIN_STEPS overrides the number of optimizer steps (the cosine schedule follows it);
# ZT_SKIP_BUILD=1 uses the build as it is (the ctest entry examples.main_job runs this script
# that way, with a short ZT_MAIN_STEPS).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ZT_BUILD_DIR:-$root/build}"
job="$build/main_job"
python="${ZT_VENV:-$HOME/.cache/zerotorch/venv-torch-2.11.0}/bin/python"
# Only what the job runs: the trainer, the launcher and the pre-tokenizer (and the libraries they
# link), not the tests, benchmarks or the CUDA plugin.
if [ "${ZT_SKIP_BUILD:-0}" != "1" ]; then
  ZT_BUILD_TARGETS="train_gpt ztrun zt-pretokenize" bash "$root/scripts/build.sh"
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
steps="${ZT_MAIN_STEPS:-800}"
"$build/bin/ztrun" --standalone --nproc-per-node 2 "$build/bin/train_gpt" \
  --config configs/gpt_main.yaml --set scheduler.params.total_num_steps="$steps" \
  --train-shard "$corpora/kjv_train.ztt" --valid-shard "$corpora/kjv_valid.ztt" \
  --steps "$steps" --eval-interval "${ZT_MAIN_EVAL_INTERVAL:-100}" --out-dir "$job" \
  --checkpoint-dir "$job/checkpoints" --fresh --sample-tokens 40 --top-k 40 --temperature 0.8 \
  --sample-prompt "And God said|In the beginning|Blessed are they that|The LORD is my shepherd"
"$python" "$root/examples/gpt/plot_metrics.py" "$job/metrics.jsonl" "$job/loss.png"
echo "[main] done in $(( $(date +%s) - start )) s after the build; outputs in $job"
