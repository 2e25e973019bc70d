#!/usr/bin/env bash
# The deepspeed_checkpoint tests' setup: runs the real `deepspeed` package (2 ranks, CPU, gloo)
# through deepspeed_reference.py into OUT_DIR/stage2 and OUT_DIR/stage3. Exits 77 (ctest's skip) with one line saying why
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
# One run per DeepSpeed ZeRO stage whose universal checkpoint differs in layout: 2 (shaped
# values, step.pt) and 3 (flat values, no step.pt).
for stage in 2 3; do
  dir="$out/stage$stage"
  mkdir -p "$dir"
  port=$(( 20000 + RANDOM % 20000 ))
  ZT_DS_STAGE=$stage DS_ACCELERATOR=cpu PATH="$PATH:$venv/bin" OMP_NUM_THREADS=1 \
    "$venv/bin/python" -m torch.distributed.run --nproc_per_node 2 --master_port "$port" \
    "$(dirname "$0")/deepspeed_reference.py" "$dir" >"$dir/deepspeed.log" 2>&1 ||
    { tail -n 30 "$dir/deepspeed.log"; echo "deepspeed_reference.py failed (log: $dir/deepspeed.log)"; exit 1; }
  grep "deepspeed_reference:" "$dir/deepspeed.log"
  cat "$dir/losses.json"; echo
done
