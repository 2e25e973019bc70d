#!/usr/bin/env bash
# config.json keys the BERT example does not compute are refused with one line naming the file
# and the key (models/bert/bert_config.h), through zt_bert_logits, which reads a directory as
# train_bert does: each case edits one key of a valid tiny BERT made by transformers.
#   bert_config_errors_test.sh BIN_DIR WORK_DIR PYTHON
set -euo pipefail
bin="$1"; work="$2"; python="$3"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$work/config_errors"
rm -rf "$out"; mkdir -p "$out"
"$python" "$here/check_hf_bert.py" make bert "$out/good" "$out/good_sharded" 64 16
"$python" "$here/check_hf_bert.py" inputs "$out/good" "$out/inputs.safetensors" 8
"$bin/zt_bert_logits" "$out/good" "$out/inputs.safetensors" "$out/logits.safetensors"
expect_error() {  # expect_error NAME KEY VALUE PATTERN
  local name="$1" key="$2" value="$3" pattern="$4" dir="$out/$1"
  cp -r "$out/good" "$dir"
  "$python" - "$dir/config.json" "$key" "$value" <<'PY'
import json, sys
path, key, value = sys.argv[1:]
c = json.load(open(path))
c[key] = json.loads(value)
json.dump(c, open(path, "w"), indent=2)
PY
  if "$bin/zt_bert_logits" "$dir" "$out/inputs.safetensors" "$dir/logits" > "$dir.log" 2>&1; then
    echo "$name: accepted"; exit 1
  fi
  if ! grep -q "$dir/config.json: $pattern" "$dir.log" || [ "$(wc -l < "$dir.log")" -ne 1 ]; then
    echo "$name: not one line with '$pattern':"; cat "$dir.log"; exit 1
  fi
  echo "$name: $(cat "$dir.log")"
}
expect_error act hidden_act '"relu"' "hidden_act 'relu' is not supported"
expect_error positions position_embedding_type '"relative_key"' \
  "position_embedding_type 'relative_key' is not supported"
expect_error decoder is_decoder true "is_decoder is true"
expect_error cross add_cross_attention true "add_cross_attention is true"
expect_error type model_type '"gpt2"' "model_type is 'gpt2'"
expect_error heads num_attention_heads 5 "hidden_size 32 is not divisible by num_attention_heads 5"
expect_error problem problem_type '"multi_label_classification"' \
  "problem_type 'multi_label_classification' is not supported"
