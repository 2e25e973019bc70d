#!/bin/bash
# ZeRO++ qwZ on the GPT example: 50 fp32 steps at ZeRO-3 on 2 ranks with and without
# zero_optimization.zero_quantized_weights, the same batches. Each step's loss with int8 weight
# gathers must stay within 2% of the exact run's (relative), and the last five steps' mean within
# 1%: the gathered weights are off by at most half a quantization step of their block
# (core/zero/block_quant.h), which moves the loss by far less than the steps move it.
#
# usage: gpt_quantized_weights.sh BIN_DIR WORK_DIR PYTHON CONFIG
set -euo pipefail
bin="$1"; work="$2"; python="$3"; config="$4"
out="$work/quantized_weights"
rm -rf "$out"; mkdir -p "$out"
train=("$bin/train_gpt" --config "$config" --train-shard "$work/tiny_train.ztt" --steps 50
       --sample-tokens 0 --set model.n_layer=2 --set model.n_head=2 --set model.d_model=64
       --set model.vocab_size=0 --set model.max_seq_len=32 --set model.dropout=0
       --set data.max_length=32 --set data.max_tokens=512 --set bf16.enabled=false
       --set scheduler.params.total_num_steps=50 --set steps_per_print=25
       --set checkpoint.save_interval=0)
for mode in exact quantized; do
  q=false; [ "$mode" = quantized ] && q=true
  timeout -s KILL 300 "$bin/ztrun" --standalone --nproc-per-node 2 "${train[@]}" \
    --out-dir "$out/$mode" --checkpoint-dir "$out/$mode/ckpt" \
    --set zero_optimization.zero_quantized_weights=$q >"$out/$mode.log" 2>&1 ||
    { tail -20 "$out/$mode.log"; echo "FAIL: the $mode run failed"; exit 1; }
done
"$python" - "$out/exact/metrics.jsonl" "$out/quantized/metrics.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(p)] for p in sys.argv[1:3])
assert len(a) == len(b) == 50, (len(a), len(b))
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
assert a != b, "the quantized run equals the exact one: nothing was quantized"
assert worst <= 2e-2, f"a step's loss differs by {worst:.2e} relative (bound 2e-2)"
tail = abs(sum(a[-5:]) - sum(b[-5:])) / abs(sum(a[-5:]))
assert tail <= 1e-2, f"the last five steps' mean differs by {tail:.2e} relative (bound 1e-2)"
print(f"PASS: 50 steps with int8 weight gathers: losses within {worst:.1e} relative of exact "
      f"(last five {tail:.1e}); loss {a[0]:.3f} -> {a[-1]:.3f} exact, {b[-1]:.3f} quantized")
PY
