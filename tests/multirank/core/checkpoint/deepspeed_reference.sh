#!/usr/bin/env bash
# The deepspeed_checkpoint tests' setup: runs the real `deepspeed` package (2 ranks, CPU, gloo)
# through deepspeed_reference.py into OUT_DIR. Exits 77 (ctest's skip) with one line saying why
# when the DeepSpeed venv (scripts/setup_deepspeed.sh) is absent.
# usage: deepspeed_reference.sh OUT_DIR
set -euo pipefail
out=$1
venv=${ZT_DS_VENV:-$HOME/.cache/zerotorch/venv-deepspeed}
rm -rf "$out"  # a skipped setup leaves no reference of an earlier run behind
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import deepspeed" 2>/dev/null; then
  echo "skip: no DeepSpeed venv at $venv (scripts/setup_deepspeed.sh creates it)"
  exit 77
fi
mkdir -p "$out"
port=$(( 20000 + RANDOM % 20000 ))
DS_ACCELERATOR=cpu PATH="$venv/bin:$PATH" OMP_NUM_THREADS=1 \
  "$venv/bin/python" -m torch.distributed.run --nproc_per_node 2 --master_port "$port" \
  "$(dirname "$0")/deepspeed_reference.py" "$out" >"$out/deepspeed.log" 2>&1 ||
  { tail -n 30 "$out/deepspeed.log"; echo "deepspeed_reference.py failed (log: $out/deepspeed.log)"; exit 1; }
grep "deepspeed_reference:" "$out/deepspeed.log"
cat "$out/losses.json"; echo
