#!/usr/bin/env bash
# Batching modes of train_classifier: random batches padded to data.max_length (fixed) and
# random batches padded to their longest text, a few steps each; both must give well-formed
# metrics, and padding must order fixed > random > smart (the smart run of
# classifier_train_loss_decreases).
#   classifier_padding_test.sh BIN_DIR WORK_DIR PYTHON CONFIG
set -euo pipefail
bin="$1"; work="$2"; python="$3"; config="$4"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
for mode in fixed random; do
  bash "$here/classifier_train_test.sh" "$bin" "$work" "$python" "$mode" "$config" 6 finite \
    --batching "$mode"
done
# On the test device (ZT_TEST_DEVICE, set where it is built) and on the CPU, in fp32: the same
# losses. (In bf16 no tight bound holds: attention takes PyTorch's math path on the device and a
# fused kernel on the CPU, and their last-bit differences flip bf16 roundings now and then.)
if [ -n "${ZT_TEST_DEVICE:-}" ]; then
  for device in cpu "$ZT_TEST_DEVICE"; do
    bash "$here/classifier_train_test.sh" "$bin" "$work" "$python" "fp32_$device" "$config" 6 \
      finite --batching fixed --set bf16.enabled=false --device "$device" 2>&1 |
      tee "$work/fp32_$device.log"
  done
  "$python" "$here/same_losses.py" "$work/fp32_cpu" "$work/fp32_$ZT_TEST_DEVICE" 1e-5 \
    "$work/fp32_$ZT_TEST_DEVICE.log" "$ZT_TEST_DEVICE"
fi
"$python" - "$work" <<'PY'
import json, sys
pad = {m: json.loads(open(f"{sys.argv[1]}/{m}/summary.json").read())["padding_fraction"]
       for m in ("smart", "random", "fixed")}
print("padding fraction:", pad)
assert pad["fixed"] > pad["random"] > pad["smart"], pad
PY
