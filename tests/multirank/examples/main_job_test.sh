#!/usr/bin/env bash
# The README's first command, end to end after the build: scripts/run_main.sh (corpus,
# pre-tokenization, 2-rank ZeRO-3 bf16 training of the GPT example, plot), then checks what it
# promises: validation perplexity falls, metrics and plot are written, a checkpoint is complete.
# usage: main_job_test.sh SOURCE_DIR BUILD_DIR PYTHON
set -euo pipefail
src=$1 build=$2 py=$3
ZT_SKIP_SETUP=1 ZT_SKIP_BUILD=1 ZT_BUILD_DIR="$build" bash "$src/scripts/run_main.sh"
job="$build/main_job"
for f in metrics.jsonl summary.json loss.png checkpoints/latest; do
  [ -s "$job/$f" ] || { echo "main job: $job/$f missing or empty"; exit 1; }
done
tag=$(cat "$job/checkpoints/latest")
[ -s "$job/checkpoints/$tag/metadata.ztm" ] || { echo "main job: checkpoint $tag incomplete"; exit 1; }
"$py" - "$job" <<'PY'
import json, sys
job = sys.argv[1]
s = json.load(open(f"{job}/summary.json"))
rows = [json.loads(line) for line in open(f"{job}/metrics.jsonl")]
assert rows, "metrics.jsonl is empty"
print(f"main job: {s['steps']} steps, valid ppl {s['valid_ppl_before']:.1f} -> "
      f"{s['valid_ppl_after']:.1f}, {s['tokens_per_s']:.0f} tokens/s")
# Measured 4019 -> 165 at 120 steps; a quarter of the way down is a clear failure signal.
assert s["valid_ppl_after"] < 0.25 * s["valid_ppl_before"], "validation perplexity did not fall"
PY
