#!/usr/bin/env bash
# The LLaMA example (models/llama) and Hugging Face, both ways, for one architecture (llama,
# qwen2, mistral, or the mixtures of experts mixtral, qwen2_moe, qwen3_moe), against transformers
# in the project's virtualenv:
#   1. a tiny random model from transformers, saved whole and sharded with an index, imported:
#      logits within 1e-4 of transformers' (without and with right padding), and a mixture's
#      load-balancing loss within 1e-6 of transformers'; as a pytorch_model.bin (a mixture's
#      experts fused there, as transformers 5 holds them), the same logits;
#   2. train_llama --init-from it on 2 ranks at ZeRO-3, fp32, every layer's activations
#      checkpointed (the config's activation_checkpointing block), 5 steps -> zt-export-hf ->
#      from_pretrained: the exported weights' logits match the C++ model's within 1e-4; from the
#      pytorch_model.bin, the same weights;
#   3. the same 5 steps on 2 ranks at stage 0 without checkpointing export the same weights
#      within 2e-5;
#   4. in one process, from_pretrained's validation loss of the import and of the export is the
#      C++ run's logged one before and after training, and has fallen; at 2 ranks the logged
#      validation loss before training is the same (the sampler tail's repeats left out);
#   5. (llama) 2 ranks with sequence_parallel_size 2, a tiled loss and tiled MLPs train like the
#      one process: the same losses within 1e-5 and the same exported weights within 2e-5;
#   6. 2 ranks with tensor_parallel.autotp_size 2 (every layer split; qwen2's 3 key/value heads
#      unevenly, 2 and 1 with their query heads, as DeepSpeed's AutoTP deals them) train like the
#      one process, and zt-export-hf joins the slices: the same losses within 1e-5 and the same
#      exported weights within 2e-5 (key projection biases, which have no gradient and so move
#      by Adam's steps on rounding noise, within 1e-2). Not for the mixtures, whose experts are
#      not split over a tensor group;
#   7. (mixtures) the export with --experts fused holds the same weights as the per-expert one;
#   8. (mixtral) 2 ranks with expert_parallel.autoep_size 2 (each rank holds 2 of the 4 experts of
#      every layer, tokens travel to them and back) train like the 2 data-parallel ranks at
#      ZeRO-3: the same losses within 1e-5 and the same exported weights within 2e-5.
#   llama_hf_roundtrip_test.sh ARCH BIN_DIR TOOL_DIR WORK_DIR PYTHON CONFIG
set -euo pipefail
arch="$1"; bin="$2"; tools="$3"; work="$4"; python="$5"; config="$6"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$work/llama_$arch"
rm -rf "$out"; mkdir -p "$out"
check="$python $here/check_hf_llama.py"
train() {  # [init=DIR] train() NPROC NAME [args...]
  local np="$1" name="$2"; shift 2
  "$bin/ztrun" --standalone --nproc-per-node "$np" "$bin/train_llama" --config "$config" \
    --init-from "${init:-$out/in_sharded}" --train-shard "$work/tiny_train.ztt" \
    --valid-shard "$work/tiny_valid.ztt" --steps 5 --out-dir "$out/$name" \
    --checkpoint-dir "$out/$name/ckpt" --set bf16.enabled=false --set data.max_length=32 \
    --set data.max_tokens=256 --set scheduler.params.total_num_steps=5 \
    --set scheduler.params.warmup_num_steps=1 --set optimizer.params.lr=1e-2 \
    --set steps_per_print=1 "$@"
}
# Each Python start imports torch and transformers (seconds): the checks are collected in
# `checks` and run in one process at the end (check_hf_llama.py takes commands separated by "+").
checks=()
later() { checks+=(+ "$@"); }
$check make "$arch" "$out/in" "$out/in_sharded" 128 + ids "$out/ids.safetensors" 128 32
for d in in in_sharded; do
  "$tools/zt_llama_logits" "$out/$d" "$out/ids.safetensors" "$out/$d.logits.safetensors"
  later logits "$out/$d" "$out/ids.safetensors" "$out/$d.logits.safetensors" --sensitive
done
"$tools/zt_llama_logits" "$out/in_bin" "$out/ids.safetensors" "$out/in_bin.logits.safetensors"
later same_logits "$out/in.logits.safetensors" "$out/in_bin.logits.safetensors"
train 2 z3 --set model.activation_checkpointing=true
grep -q '"checkpointed_calls_per_forward": *2[,}]' "$out/z3/summary.json" ||
  { echo "z3 did not checkpoint both layers: $(cat "$out/z3/summary.json")"; exit 1; }
"$bin/zt-export-hf" "$out/z3/ckpt" "$out/z3/hf"
"$tools/zt_llama_logits" "$out/z3/hf" "$out/ids.safetensors" "$out/z3.logits.safetensors"
later logits "$out/z3/hf" "$out/ids.safetensors" "$out/z3.logits.safetensors"
# On the test device (ZT_TEST_DEVICE, set where it is built; one architecture suffices): the same
# run exports the same weights (attention there takes PyTorch's math path, the CPU a fused
# kernel, so the last bits may differ).
if [ -n "${ZT_TEST_DEVICE:-}" ] && [ "$arch" = llama ]; then
  train 2 device --set model.activation_checkpointing=true --device "$ZT_TEST_DEVICE" 2>&1 |
    tee "$out/device.log"
  "$python" "$here/same_losses.py" "$out/z3" "$out/device" 1e-5 "$out/device.log" \
    "$ZT_TEST_DEVICE"
  "$bin/zt-export-hf" "$out/device/ckpt" "$out/device/hf"
  later same "$out/device/hf" "$out/z3/hf" 2e-5
fi
# The same from pytorch_model.bin (read whole, then into the shards): the same weights.
init="$out/in_bin" train 2 z3bin --set model.activation_checkpointing=true
"$bin/zt-export-hf" "$out/z3bin/ckpt" "$out/z3bin/hf"
later same "$out/z3bin/hf" "$out/z3/hf" 0
# The same 2 ranks at stage 0 (whole model, plain data parallel), without checkpointing, train
# on the same batches: the same weights.
train 2 z0 --set zero_optimization.stage=0 --set model.activation_checkpointing=false
grep -q '"checkpointed_calls_per_forward": *0[,}]' "$out/z0/summary.json" ||
  { echo "z0 checkpointed: $(cat "$out/z0/summary.json")"; exit 1; }
"$bin/zt-export-hf" "$out/z0/ckpt" "$out/z0/hf" --family llama
later same "$out/z0/hf" "$out/z3/hf" 2e-5
# One process: its validation pass covers each sample once (at 2 ranks the sampler repeats
# samples to even out the ranks), so Python's loss must equal the logged one.
train 1 one
# Ulysses sequence parallelism (one architecture suffices; its GQA heads exchange whole): 2 ranks
# that split every sequence form one data-parallel rank, so they read the 1-rank run's batches
# and train like it, step by step, to the same weights; with the head and loss computed 5
# positions at a time (model.loss_tile_tokens) and each checkpointed layer's MLP 3 at a time
# (model.mlp_tile_tokens), which change only the order of sums.
sp_runs=()
if [ "$arch" = llama ]; then
  train 2 sp2 --set sequence_parallel_size=2 --set model.loss_tile_tokens=5 \
    --set model.mlp_tile_tokens=3 --set model.activation_checkpointing=true
  "$python" "$here/same_losses.py" "$out/one" "$out/sp2" 1e-5
  "$bin/zt-export-hf" "$out/sp2/ckpt" "$out/sp2/hf"
  later same "$out/sp2/hf" "$out/one/hf" 2e-5
  sp_runs=("$out/sp2/summary.json")
fi
# AutoTP's llama split over 2 ranks that form one data-parallel rank: each holds half of every
# projection, reads the 1-rank run's batches, and its checkpoint holds slices that the export
# joins; only the order of the row-parallel sums differs.
tp_runs=()
case "$arch" in
  mixtral | qwen2_moe | qwen3_moe) moe=1 ;;
  *) moe=0 ;;
esac
if [ "$moe" = 0 ]; then
  train 2 tp2 --set tensor_parallel.autotp_size=2 --set tensor_parallel.preset_model=llama
  "$python" "$here/same_losses.py" "$out/one" "$out/tp2" 1e-5
  "$bin/zt-export-hf" "$out/tp2/ckpt" "$out/tp2/hf"
  # (qwen2's key biases have no gradient: their Adam steps follow the split's rounding.)
  later same "$out/tp2/hf" "$out/one/hf" 2e-5 key_bias_noise
  tp_runs=("$out/tp2/summary.json")
else
  "$bin/zt-export-hf" "$out/z3/ckpt" "$out/z3/hf_fused" --experts fused
  later same "$out/z3/hf_fused" "$out/z3/hf" 0
fi
# Expert parallelism (one architecture suffices): the same 2 data-parallel ranks, each holding
# half of every layer's experts; the checkpoint holds each rank's experts, which the export joins.
if [ "$arch" = mixtral ]; then
  train 2 ep2 --set model.activation_checkpointing=true --set expert_parallel.enabled=true \
    --set expert_parallel.autoep_size=2
  "$python" "$here/same_losses.py" "$out/z3" "$out/ep2" 1e-5
  "$bin/zt-export-hf" "$out/ep2/ckpt" "$out/ep2/hf"
  later same "$out/ep2/hf" "$out/z3/hf" 2e-5
  params() { grep -o '"parameters": *[0-9]*' "$1"; }
  [ "$(params "$out/ep2/summary.json")" = "$(params "$out/z3/summary.json")" ] ||
    { echo "ep2 reports $(params "$out/ep2/summary.json"), not the whole model's"; exit 1; }
  tp_runs=("$out/ep2/summary.json")
fi
# Validation counts each sample once at any rank count: the 2-rank runs leave the sampler tail's
# repeats out, so their loss before training is the 1-rank run's (only the summation order
# differs).
"$python" - "$out/one/summary.json" "$out/z3/summary.json" "$out/z0/summary.json" \
  "${tp_runs[@]}" "${sp_runs[@]}" <<'PY'
import json, sys
one, *others = [json.load(open(p))["valid_loss_before"] for p in sys.argv[1:]]
for other in others:
    assert abs(other - one) <= 1e-6 * abs(one), f"validation loss {other} at 2 ranks vs {one} at 1"
print(f"validation loss before training: {one} at 1 rank, {others} at 2")
PY
"$bin/zt-export-hf" "$out/one/ckpt" "$out/one/hf"
later moved "$out/in" "$out/one/hf" "$work/tiny_valid.ztt" 32 "$out/one/summary.json"
$check "${checks[@]:1}"
echo "llama_hf_roundtrip $arch: ok"
