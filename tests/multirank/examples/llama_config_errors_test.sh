#!/usr/bin/env bash
# What the LLaMA example cannot compute, or a directory that does not hold what its config says,
# stops with one line naming the file and the key or tensor, and a non-zero exit:
#   llama_config_errors_test.sh BIN_DIR TOOL_DIR WORK_DIR PYTHON CONFIG
set -euo pipefail
bin="$1"; tools="$2"; work="$3"; python="$4"; config="$5"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$work/llama_errors"
rm -rf "$out"; mkdir -p "$out"
$python "$here/check_hf_llama.py" make llama "$out/good" "$out/good_sharded" 128
$python "$here/check_hf_llama.py" ids "$out/ids.safetensors" 128 16
# variant NAME PYTHON-EXPRESSION-ON-cfg: a copy of the good directory with config.json edited.
variant() {
  rm -rf "$out/$1"; cp -r "$out/good" "$out/$1"
  $python - "$out/$1/config.json" "$2" <<'PY'
import json, sys
path, edit = sys.argv[1], sys.argv[2]
cfg = json.load(open(path))
exec(edit)
json.dump(cfg, open(path, "w"))
PY
}
# expect NAME PATTERN COMMAND...: fails, with one error line matching PATTERN.
expect() {
  local name="$1" pattern="$2"; shift 2
  set +e; "$@" >"$out/$name.log" 2>&1; local rc=$?; set -e
  local line; line="$(grep -E "error: " "$out/$name.log" | head -1 || true)"
  if [ $rc -eq 0 ] || ! grep -qE -- "$pattern" <<<"$line"; then
    echo "FAIL $name: rc $rc, expected an error matching '$pattern'; output:"; cat "$out/$name.log"
    exit 1
  fi
  echo "ok   $name: $line"
}
logits() { "$tools/zt_llama_logits" "$out/$1" "$out/ids.safetensors" "$out/$1.out.safetensors"; }
variant act 'cfg["hidden_act"] = "gelu"'
expect act "act/config.json: hidden_act 'gelu' is not silu" logits act
variant yarn 'cfg["rope_parameters"] = {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e4}'
expect yarn "yarn/config.json: rope_parameters.rope_type 'yarn' is not computed" logits yarn
variant partial 'cfg["rope_parameters"]["partial_rotary_factor"] = 0.5'
expect partial "partial/config.json: rope_parameters.partial_rotary_factor is not 1" logits partial
variant gemma 'cfg["model_type"] = "gemma"'
expect gemma "gemma/config.json: model_type 'gemma' is not llama, qwen2, mistral, mixtral, qwen2_moe or qwen3_moe" \
  logits gemma
variant heads 'cfg["num_key_value_heads"] = 3'
expect heads "heads/config.json: num_attention_heads 4 is not a multiple of num_key_value_heads 3" \
  logits heads
variant noheads 'del cfg["num_attention_heads"]'
expect noheads "noheads/config.json: missing num_attention_heads" logits noheads
variant wide 'cfg["intermediate_size"] = 64'
expect wide "wide/model.safetensors: tensor 'model.layers.0.mlp.gate_proj.weight' is \[48, 32\], parameter model.layers.0.mlp.gate_proj.weight \[64, 32\]" \
  logits wide
# A weights file missing a tensor, and one holding a tensor the model has not.
rm -rf "$out/missing" "$out/extra"; cp -r "$out/good" "$out/missing"; cp -r "$out/good" "$out/extra"
$python - "$out" <<'PY'
import sys
from safetensors.torch import load_file, save_file
out = sys.argv[1]
t = load_file(f"{out}/good/model.safetensors")
save_file({k: v for k, v in t.items() if k != "model.norm.weight"},
          f"{out}/missing/model.safetensors", metadata={"format": "pt"})
save_file({**t, "model.extra.weight": t["model.norm.weight"].clone()}, f"{out}/extra/model.safetensors",
          metadata={"format": "pt"})
PY
expect missing "missing/model.safetensors: no tensor 'model.norm.weight' for parameter model.norm.weight" \
  logits missing
expect extra "extra/model.safetensors: tensor 'model.extra.weight' matches no parameter of the model" \
  logits extra
# Mixtures of experts: router jitter (random scaling in training) is not computed; an expert
# missing from the per-expert files is named with the fused parameter it belongs to; the experts
# do not split over a tensor group; the tiled MLP does not route.
$python "$here/check_hf_llama.py" make mixtral "$out/moe" "$out/moe_sharded" 128
rm -rf "$out/jitter"; cp -r "$out/moe" "$out/jitter"
$python - "$out/jitter/config.json" <<'PY'
import json, sys
cfg = json.load(open(sys.argv[1])); cfg["router_jitter_noise"] = 0.1
json.dump(cfg, open(sys.argv[1], "w"))
PY
expect jitter "jitter/config.json: router_jitter_noise is not computed" logits jitter
rm -rf "$out/no_expert"; cp -r "$out/moe" "$out/no_expert"
$python - "$out" <<'PY'
import sys
from safetensors.torch import load_file, save_file
out = sys.argv[1]
t = load_file(f"{out}/moe/model.safetensors")
gone = "model.layers.1.block_sparse_moe.experts.3.w2.weight"
save_file({k: v for k, v in t.items() if k != gone}, f"{out}/no_expert/model.safetensors",
          metadata={"format": "pt"})
PY
expect no_expert "no_expert/model.safetensors: no tensor 'model.layers.1.block_sparse_moe.experts.3.w2.weight' for parameter model.layers.1.mlp.experts.down_proj" \
  logits no_expert
expect moe_tp "tensor_parallel.autotp_size 2: mixtral's experts are not split over a tensor group" \
  "$bin/ztrun" --standalone --nproc-per-node 2 "$bin/train_llama" --config "$config" \
  --init-from "$out/moe" --train-shard "$work/tiny_train.ztt" --steps 1 \
  --out-dir "$out/moe_tp" --set tensor_parallel.autotp_size=2 --set bf16.enabled=false
expect moe_tiles "model.mlp_tile_tokens: the tiled MLP is not computed for mixtral's routed layers" \
  "$bin/train_llama" --config "$config" --init-from "$out/moe" \
  --train-shard "$work/tiny_train.ztt" --steps 1 --out-dir "$out/moe_tiles" \
  --set model.mlp_tile_tokens=4 --set bf16.enabled=false
# A config `model` block that contradicts the pretrained directory's shape.
expect disagree "config .model. block disagrees with .*good/config.json \(model.hidden_size\)" \
  "$bin/train_llama" --config "$config" --init-from "$out/good" \
  --train-shard "$work/tiny_train.ztt" --steps 1 --out-dir "$out/disagree" \
  --set model.hidden_size=64 --set bf16.enabled=false --set zero_optimization.stage=0
# Sequence parallelism: a size that does not divide the ranks, heads that do not split over it
# (3 key/value heads over 4 ranks), and a program whose model has no sequence-parallel attention.
expect sp_ranks "sequence_parallel_size: must divide the number of ranks \(1\), got 2" \
  "$bin/train_llama" --config "$config" --init-from "$out/good" \
  --train-shard "$work/tiny_train.ztt" --steps 1 --out-dir "$out/sp_ranks" \
  --set sequence_parallel_size=2 --set bf16.enabled=false
expect sp_heads "sequence_parallel_size 4: the model's 3 key/value heads are fewer than the ranks" \
  "$bin/ztrun" --standalone --nproc-per-node 4 "$bin/train_llama" --config "$config" \
  --train-shard "$work/tiny_train.ztt" --steps 1 --out-dir "$out/sp_heads" \
  --set sequence_parallel_size=4 --set bf16.enabled=false --set model.num_attention_heads=6 \
  --set model.num_key_value_heads=3 --set model.hidden_size=48 --set model.num_hidden_layers=1 \
  --set model.intermediate_size=64 --set model.max_position_embeddings=128
expect sp_gpt "sequence_parallel_size 2: this program's model has no sequence-parallel attention" \
  "$bin/ztrun" --standalone --nproc-per-node 2 "$bin/train_gpt" \
  --config "$(dirname "$config")/gpt_main.yaml" --train-shard "$work/tiny_train.ztt" --steps 1 \
  --out-dir "$out/sp_gpt" --set sequence_parallel_size=2
# Tensor parallelism: a program whose model does not split its layers.
expect tp_gpt "tensor_parallel.autotp_size 2: this program's model does not split its layers" \
  "$bin/ztrun" --standalone --nproc-per-node 2 "$bin/train_gpt" \
  --config "$(dirname "$config")/gpt_main.yaml" --train-shard "$work/tiny_train.ztt" --steps 1 \
  --out-dir "$out/tp_gpt" --set tensor_parallel.autotp_size=2
# partition_config patterns act on Python models; the C++ LLaMA family splits as the llama preset.
expect tp_patterns "tensor_parallel.partition_config: this program's model splits as DeepSpeed's llama preset" \
  "$bin/train_llama" --config "$config" --init-from "$out/good" \
  --train-shard "$work/tiny_train.ztt" --steps 1 --out-dir "$out/tp_patterns" \
  --set 'tensor_parallel.partition_config={"layer_specs": []}' --set bf16.enabled=false
echo "llama_config_errors: ok"
