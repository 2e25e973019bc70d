#!/usr/bin/env bash
# train_gpt on the host-backed test device against the same run on the CPU: 2 ranks under ztrun,
# ZeRO stage 3 with partitioned construction (the shards are built on the device), the config's
# AdamW (CpuAdam on the CPU, ATen's update on the device), validation, sampling and a checkpoint.
# Each step's loss and the validation losses (log perplexities) must agree within 1e-5 relative,
# and the device run must say where it trained. In fp32: the two runs differ in their last bits
# by construction (the optimizers above, and attention: the test device computes
# scaled_dot_product_attention on PyTorch's math path, the CPU on its fused kernel), and in bf16
# such a difference flips a weight's rounding now and then, so no tight bound holds there;
# tests/multirank/core/engine/device_test.cpp compares bf16 engines on the device bit for bit.
#   gpt_device_test.sh BIN_DIR WORK_DIR PYTHON CONFIG
set -euo pipefail
bin="$1"; work="$2"; python="$3"; config="$4"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
for device in cpu zttest; do
  bash "$here/gpt_train_test.sh" "$bin" "$work" "$python" "device_$device" "$config" 4 finite \
    --device "$device" --set data.max_tokens=512 --set bf16.enabled=false 2>&1 | tee "$work/device_$device.log"
done
grep -q "device: zttest:0" "$work/device_zttest.log" || { echo "no 'device: zttest:0' line"; exit 1; }
"$python" - "$work/device_cpu" "$work/device_zttest" <<'PY'
import json, math, sys
def rows(d):
    return [json.loads(l) for l in open(f"{d}/metrics.jsonl")]
def summary(d):
    return json.loads(open(f"{d}/summary.json").read())
cpu, dev = rows(sys.argv[1]), rows(sys.argv[2])
assert len(cpu) == len(dev) == 4, (len(cpu), len(dev))
for a, b in zip(cpu, dev):
    assert math.isclose(a["loss"], b["loss"], rel_tol=1e-5), (a["step"], a["loss"], b["loss"])
sc, sd = summary(sys.argv[1]), summary(sys.argv[2])
for key in ("valid_ppl_before", "valid_ppl_after"):  # as losses: log perplexity
    assert math.isclose(math.log(sc[key]), math.log(sd[key]), rel_tol=1e-5), (key, sc[key], sd[key])
print("device run equals the CPU run:", [round(r["loss"], 6) for r in dev])
PY
