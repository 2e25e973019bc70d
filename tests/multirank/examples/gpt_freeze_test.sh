#!/usr/bin/env bash
# Freezing embeddings through the config: train_gpt with freeze=[wte.*, wpe.*] (the tied head is
# wte too) at stage 3 for a few steps. train_gpt compares every parameter with a copy taken
# before training (parameter_snapshot.h) and writes the counts into summary.json: the 2 frozen
# ones must be bit-identical, every trainable one must have changed. fp32: in bf16 a LayerNorm
# weight of 1.0 need not move by one bf16 ulp in 4 warm-up steps.
#   gpt_freeze_test.sh BIN_DIR WORK_DIR PYTHON CONFIG
set -euo pipefail
bin="$1"; work="$2"; python="$3"; config="$4"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bash "$here/gpt_train_test.sh" "$bin" "$work" "$python" freeze "$config" 4 finite \
  --set 'freeze=[wte.*, wpe.*]' --set data.max_tokens=512 --set bf16.enabled=false
"$python" - "$work/freeze/summary.json" <<'PY'
import json, sys
s = json.loads(open(sys.argv[1]).read())
assert s["frozen_parameters"] == 2, s
assert s["frozen_unchanged"] == 2, f"frozen embeddings changed: {s}"
assert s["trainable_parameters"] > 0 and s["trainable_changed"] == s["trainable_parameters"], s
print(f"frozen: {s['frozen_unchanged']}/{s['frozen_parameters']} bit-identical; trainable: "
      f"{s['trainable_changed']}/{s['trainable_parameters']} changed")
PY
