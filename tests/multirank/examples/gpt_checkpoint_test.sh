#!/usr/bin/env bash
# Activation checkpointing must not change training: train_gpt at stage 3, fp32, dropout 0,
# with and without model.activation_checkpointing, and with it limited to the first block and its
# saved inputs in host memory (the config's activation_checkpointing block, which the engine
# hands to zt::checkpoint_activations); the per-step losses must agree.
#   gpt_checkpoint_test.sh BIN_DIR WORK_DIR PYTHON CONFIG
set -euo pipefail
bin="$1"; work="$2"; python="$3"; config="$4"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
for ac in false true; do
  bash "$here/gpt_train_test.sh" "$bin" "$work" "$python" "checkpointing_$ac" "$config" 5 finite \
    --set bf16.enabled=false --set data.max_tokens=512 --set model.activation_checkpointing=$ac
done
bash "$here/gpt_train_test.sh" "$bin" "$work" "$python" checkpointing_first "$config" 5 finite \
  --set bf16.enabled=false --set data.max_tokens=512 --set model.activation_checkpointing=true \
  --set activation_checkpointing.number_checkpoints=1 \
  --set activation_checkpointing.cpu_checkpointing=true
"$python" - "$work"/checkpointing_{false,true,first}/metrics.jsonl <<'PY'
import json, sys
a, *others = ([json.loads(l)["loss"] for l in open(p)] for p in sys.argv[1:])
for b in others:
    assert len(a) == len(b) and all(abs(x - y) <= 1e-5 * abs(x) for x, y in zip(a, b)), (a, b)
print(f"losses with and without activation checkpointing agree: {a}")
PY
