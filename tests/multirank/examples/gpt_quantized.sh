#!/bin/bash
# ZeRO++ qwZ, qgZ or quantized frozen weights on the GPT example: 50 fp32 ZeRO-3 steps with and
# without the key, the same batches. Each step's loss must stay within 2% of the exact run's (relative), and the last five
# steps' mean within 1%: a quantized value is off by at most half a quantization step of its
# block (core/zero/block_quant.h), which moves the loss by far less than the steps move it.
#   weights:   zero_quantized_weights, 2 ranks (int8 weight gathers)
#   gradients: zero_quantized_gradients, 4 ranks as two local nodes of 2 (two ztruns, --nnodes 2
#              on 127.0.0.1), so the reduction takes its two int8 all-to-alls
#   nontrainable: zero_quantized_nontrainable_weights, 2 ranks, every weight matrix and LayerNorm
#              weight of the blocks frozen (freeze=[blocks.*.weight]: biases and embeddings train),
#              so the blocks' frozen shards are stored and gathered as int8 blocks
#
# usage: gpt_quantized.sh BIN_DIR WORK_DIR PYTHON CONFIG weights|gradients|nontrainable
set -euo pipefail
bin="$1"; work="$2"; python="$3"; config="$4"; what="$5"
case "$what" in
  weights) key=zero_optimization.zero_quantized_weights ;;
  gradients) key=zero_optimization.zero_quantized_gradients ;;
  nontrainable) key=zero_optimization.zero_quantized_nontrainable_weights ;;
  *) echo "usage: $0 BIN_DIR WORK_DIR PYTHON CONFIG weights|gradients|nontrainable" >&2; exit 2 ;;
esac
out="$work/quantized_$what"
rm -rf "$out"; mkdir -p "$out"
train=("$bin/train_gpt" --config "$config" --train-shard "$work/tiny_train.ztt" --steps 50
       --sample-tokens 0 --set model.n_layer=2 --set model.n_head=2 --set model.d_model=64
       --set model.vocab_size=0 --set model.max_seq_len=32 --set model.dropout=0
       --set data.max_length=32 --set data.max_tokens=512 --set bf16.enabled=false
       --set scheduler.params.total_num_steps=50 --set steps_per_print=25
       --set checkpoint.save_interval=0)
[ "$what" = nontrainable ] && train+=(--set 'freeze=[blocks.*.weight]')
port=$((29000 + RANDOM % 2000))
for mode in exact quantized; do
  q=false; [ "$mode" = quantized ] && q=true
  args=("${train[@]}" --out-dir "$out/$mode" --checkpoint-dir "$out/$mode/ckpt" --set "$key=$q")
  if [ "$what" != gradients ]; then
    timeout -s KILL 300 "$bin/ztrun" --standalone --nproc-per-node 2 "${args[@]}" \
      >"$out/$mode.log" 2>&1 || { tail -20 "$out/$mode.log"; echo "FAIL: the $mode run failed"; exit 1; }
  else
    port=$((port + 1))
    pids=()
    for node in 0 1; do
      timeout -s KILL 300 "$bin/ztrun" --nnodes 2 --node-rank $node --nproc-per-node 2 \
        --master-addr 127.0.0.1 --master-port $port "${args[@]}" >"$out/$mode.node$node.log" 2>&1 &
      pids+=($!)
    done
    for p in "${pids[@]}"; do
      wait "$p" || { tail -20 "$out/$mode.node0.log"; echo "FAIL: the $mode run failed"; exit 1; }
    done
    if [ "$mode" = quantized ]; then
      grep -q "zero_quantized_gradients: int8 all-to-alls in 2 nodes of 2 ranks" \
        "$out/$mode.node0.log" || { echo "FAIL: qgZ did not take its two-hop path"; exit 1; }
    fi
  fi
done
"$python" - "$out/exact/metrics.jsonl" "$out/quantized/metrics.jsonl" "$what" "$out" <<'PY'
import json, re, sys
a, b = ([json.loads(l)["loss"] for l in open(p)] for p in sys.argv[1:3])
if sys.argv[3] == "nontrainable":
    # The engine's first line gives the frozen shards' bytes per rank: int8 blocks and their
    # scales against fp32 values, so a little over a quarter.
    frozen = [int(re.search(r"\(\+ (\d+) B frozen\)", open(f"{sys.argv[4]}/{m}.log").read())[1])
              for m in ("exact", "quantized")]
    assert frozen[1] <= 0.26 * frozen[0], f"frozen shard bytes {frozen}: not int8"
    print(f"frozen shard bytes per rank: {frozen[0]} fp32, {frozen[1]} int8 blocks and scales")
assert len(a) == len(b) == 50, (len(a), len(b))
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
assert a != b, "the quantized run equals the exact one: nothing was quantized"
assert worst <= 2e-2, f"a step's loss differs by {worst:.2e} relative (bound 2e-2)"
tail = abs(sum(a[-5:]) - sum(b[-5:])) / abs(sum(a[-5:]))
assert tail <= 1e-2, f"the last five steps' mean differs by {tail:.2e} relative (bound 1e-2)"
print(f"PASS: 50 steps with int8 {sys.argv[3]}: losses within {worst:.1e} relative of exact "
      f"(last five {tail:.1e}); loss {a[0]:.3f} -> {a[-1]:.3f} exact, {b[-1]:.3f} quantized")
PY
