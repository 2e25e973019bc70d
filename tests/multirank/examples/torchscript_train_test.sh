#!/usr/bin/env bash
# train_torchscript under ztrun (2 ranks) at one ZeRO stage on the fixture of make_fixture.py,
# then the Python side: trained.pt loads, its loss matches the C++ one and fell
# (examples/torchscript/check_trained.py); metrics.jsonl has one well-formed line per step.
#   torchscript_train_test.sh BIN_DIR WORK_DIR PYTHON CONFIG STAGE
set -euo pipefail
bin="$1"; work="$2"; python="$3"; config="$4"; stage="$5"
src="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
out="$work/stage$stage"
steps=15
run() {  # run OUT [args...]
  rm -rf "$1"
  "$bin/ztrun" --standalone --nproc-per-node 2 "$bin/train_torchscript" --config "$config" \
    --model "$work/model.pt" --data "$work/data.pt" --steps $steps --out-dir "$1" \
    --set zero_optimization.stage="$stage" --set steps_per_print=5 "${@:2}"
}
run "$out"
"$python" "$src/examples/torchscript/check_trained.py" "$work" "$out"
# At stage 3, the same run on the test device (ZT_TEST_DEVICE, set where it is built): the same
# losses.
if [ -n "${ZT_TEST_DEVICE:-}" ] && [ "$stage" = 3 ]; then
  run "$out.device" --device "$ZT_TEST_DEVICE" 2>&1 | tee "$work/device.log"
  "$python" "$src/tests/multirank/examples/same_losses.py" "$out" "$out.device" 1e-5 \
    "$work/device.log" "$ZT_TEST_DEVICE"
  "$python" "$src/examples/torchscript/check_trained.py" "$work" "$out.device"
fi
"$python" - "$out/metrics.jsonl" $steps <<'PY'
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["step"] for r in rows] == list(range(1, int(sys.argv[2]) + 1)), rows
assert all(math.isfinite(r["loss"]) and r["model_state_bytes_per_rank"] > 0 for r in rows), rows
q = len(rows) // 4
first, last = (sum(r["loss"] for r in rs) / q for rs in (rows[:q], rows[-q:]))
assert last < first, f"loss did not decrease: first quarter {first}, last quarter {last}"
print(f"{len(rows)} steps, loss {rows[0]['loss']:.4f} -> {rows[-1]['loss']:.4f}")
PY
