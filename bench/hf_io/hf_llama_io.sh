#!/usr/bin/env bash
# Import and export times of a Hugging Face Llama directory with the LLaMA example
# (models/llama), for a SmolLM-135M-shaped model (30 layers, hidden 576, 9 heads over 3
# key/value heads, vocabulary 49152, tied head: 134.5M parameters, random bf16 weights):
#   - import: train_llama --init-from on 2 ranks, whole (stage 0: load by name) and into ZeRO-3
#     shards (each rank copies its ranges from the mapped file), from the log's timestamps
#     around the load (the page cache is warm: the file was just written);
#   - export: zt-export-hf of the 2-rank stage-3 checkpoint (fp32, consolidated parameter by
#     parameter), wall time and peak RSS;
#   - transformers' from_pretrained of the same directories, for reference.
#   bash bench/hf_io/hf_llama_io.sh [BUILD_DIR]    (needs a built tree and a token shard, made here)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${1:-$root/build}"
bin="$build/bin"
py="$(sed -n 's/^ZT_PYTHON:FILEPATH=//p' "$build/CMakeCache.txt")"
work="$(mktemp -d /tmp/zt_hf_io.XXXXXX)"
trap 'rm -rf "$work"' EXIT
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$py" - "$work" <<'PY'
import sys, time, torch
from transformers import LlamaConfig, LlamaForCausalLM
cfg = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                  num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=2048,
                  tie_word_embeddings=True, rms_norm_eps=1e-5)
torch.manual_seed(0)
m = LlamaForCausalLM(cfg).to(torch.bfloat16)
print(f"model: {sum(p.numel() for p in m.parameters())} parameters (bf16)")
m.save_pretrained(f"{sys.argv[1]}/in")
PY
# A token shard (a 128-token BPE over the tests' tiny corpus): the model's vocabulary is larger.
bash "$root/tests/multirank/examples/gpt_tiny_corpus.sh" "$work/text.txt"
"$bin/zt-pretokenize" --input "$work/text.txt" --model-type bpe --vocab-size 128 \
  --train-model "$work/tok.model" --add-eos --min-length 2 --output "$work/train.ztt" > /dev/null 2>&1
stamp() { sed -n "s/.*\[zt r0 I \([0-9:.]*\)\] $1.*/\1/p" "$2" | head -1; }
secs() { "$py" -c "import sys; h,m,s=sys.argv[1].split(':'); a=float(h)*3600+float(m)*60+float(s); h,m,s=sys.argv[2].split(':'); print(f'{float(h)*3600+float(m)*60+float(s)-a:.3f}')" "$1" "$2"; }
for stage in 0 3; do
  "$bin/ztrun" --standalone --nproc-per-node 2 "$bin/train_llama" \
    --config "$root/configs/llama_zero3.yaml" --init-from "$work/in" \
    --train-shard "$work/train.ztt" --steps 1 --out-dir "$work/run$stage" \
    --checkpoint-dir "$work/ckpt$stage" --set data.max_length=32 --set data.max_tokens=256 \
    --set zero_optimization.stage=$stage > "$work/run$stage.log" 2>&1
  a="$(stamp "llama:" "$work/run$stage.log")"; b="$(stamp "init from" "$work/run$stage.log")"
  echo "import, stage $stage, 2 ranks: $(secs "$a" "$b") s"
done
/usr/bin/time -f "export (zt-export-hf, fp32 %e s wall, peak RSS %M KB)" \
  "$bin/zt-export-hf" "$work/ckpt3" "$work/out" > /dev/null
ls -l "$work/out/model.safetensors" | awk '{print "exported model.safetensors: " $5 " bytes"}'
"$py" - "$work" <<'PY'
import sys, time, torch
from transformers import AutoModelForCausalLM
for d in ("in", "out"):
    t = time.time()
    AutoModelForCausalLM.from_pretrained(f"{sys.argv[1]}/{d}", dtype=torch.float32)
    print(f"transformers from_pretrained({d}): {time.time() - t:.2f} s")
PY
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
