#!/usr/bin/env bash
# bench/gpu_check.sh: the GPU proof (issues 13 and 23) in one short run on a one-GPU machine (an
# H200 with PyTorch + CUDA in its python3, nvcc, CMake and ninja; no internet, no apt):
#   1. configures a reduced CUDA build against that python's torch (ZT_REQUIRE_ALL_DEPS=OFF:
#      MPI, gloo, yaml-cpp, Boost, spdlog, SentencePiece and GTest may all be missing; ZT_WERROR
#      off, as that compiler is not CI's) and builds only the CUDA plugin, zt-gpu-checks and
#      zt-gpu-bench (Release, ninja -j $ZT_JOBS);
#   2. runs the GPU checks (tests/gpu): first NCCL with one rank alone, then the kernels against
#      their CPU references and the engine on CUDA against torch AdamW;
#   3. trains GPT-2 124M: zerotorch bf16 and fp16 at ZeRO stage 0, 2, 3 and 2 + optimizer
#      offload (bf16 also stage 3 + optimizer offload with the parameter shards in pinned host
#      memory and on NVMe, offload_param cpu/nvme), and the plain PyTorch eager baseline
#      (autocast, fused AdamW) in each dtype;
#   4. prints one table (bench/gpu/gpu_report.py): checks, every run's status, then tokens/s, MFU
#      (6 * params * tokens/s over 989 TFLOPS, the H100/H200 SXM dense bf16 peak;
#      ZT_PEAK_TFLOPS overrides) and peak memory.
#
# Fits one short GPU window: everything runs against one deadline (ZT_GPU_CHECK_BUDGET_S, 450 s
# from the start, build included); each step gets its own limit, cut to what is left, and runs
# that no longer fit are skipped and reported, most important first. It fails fast: NCCL and the
# benchmarks use 30-60 s communicator timeouts (not the library's 30 minutes), and when NCCL with
# one rank fails, the zerotorch rows are skipped (they all need it).
# Output: every file goes to one folder ($build/gpu_check: build.log, checks.log/.jsonl,
# bench.jsonl, runs.tsv, one log per run, table.txt), packed at the end, whatever happened, into
# ONE archive: $OUT/gpu_check.tar.gz (else $build/gpu_check.tar.gz). The table is the last lines
# of stdout.
#
# Exit status: 0 when every step passed; 1 when one failed or was skipped (or the build failed);
# 3 without a GPU.
# Modes: --quick: build, checks, and one row (zerotorch bf16 stage 3), about 3 minutes.
#        --dry-run: stops after the build, before the first GPU call (no deadline: for a slow
#        CPU-only machine); so does a machine without a GPU (exit 3).
# Environment: PYTHON (python3), ZT_GPU_BUILD_DIR (build-gpu), ZT_JOBS (16), ZT_BENCH_STEPS (10),
# ZT_BENCH_BATCH (16), ZT_GPU_CHECK_BUDGET_S (450), ZT_WERROR (OFF), ZT_GPU_CHECK_CMAKE_ARGS
# (extra configure arguments).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ZT_GPU_BUILD_DIR:-$root/build-gpu}"
res="$build/gpu_check"
archive="${OUT:-$build}/gpu_check.tar.gz"
py="${PYTHON:-python3}"
jobs="${ZT_JOBS:-16}"
steps="${ZT_BENCH_STEPS:-10}"
batch="${ZT_BENCH_BATCH:-16}"
peak="${ZT_PEAK_TFLOPS:-989}"
budget="${ZT_GPU_CHECK_BUDGET_S:-450}"
mode=full
for arg in "$@"; do
  case "$arg" in
    --dry-run) mode=dry ;;
    --quick) [ "$mode" = dry ] || mode=quick ;;
    *) echo "usage: $0 [--quick | --dry-run]" >&2; exit 2 ;;
  esac
done
rm -rf "$res"
mkdir -p "$res" "$(dirname "$archive")"
t0=$(date +%s)
deadline=$((t0 + budget))
log() { echo "[gpu_check +$(( $(date +%s) - t0 ))s] $*"; }
left() { echo $((deadline - $(date +%s))); }
# limit CAP: CAP seconds, or less when the deadline is nearer (never below 1).
limit() { local l; l=$(left); [ "$l" -lt "$1" ] && echo $((l > 1 ? l : 1)) || echo "$1"; }
# A run's status line for the report: name, status, seconds.
status() { printf '%s\t%s\t%s\n' "$1" "$2" "${3:-0}" >>"$res/runs.tsv"; }

# ---- the end, whatever happened: the table, then one archive ------------------------------------
# shellcheck disable=SC2317  # runs from the EXIT trap
finish() {
  local rc=$?
  "$py" "$root/bench/gpu/gpu_report.py" "$res/bench.jsonl" "$res/checks.jsonl" "$res/runs.tsv" \
    >"$res/table.txt" 2>&1 || echo "gpu_report.py failed (see above)" >>"$res/table.txt"
  # A failed build can log megabytes of errors: keep the first and last 2000 lines.
  if [ -f "$res/build.log" ] && [ "$(wc -l <"$res/build.log")" -gt 4000 ]; then
    { head -2000 "$res/build.log"; echo "... (cut) ..."; tail -2000 "$res/build.log"; } \
      >"$res/build.log.cut" && mv "$res/build.log.cut" "$res/build.log"
  fi
  if tar -czf "$archive" -C "$(dirname "$res")" "$(basename "$res")"; then
    log "results: $archive ($(find "$res" -type f | wc -l) files, exit $rc)"
  else
    log "error: could not write $archive"
  fi
  echo
  cat "$res/table.txt"
  exit "$rc"
}
trap finish EXIT
fail() { log "error: $*"; status "$2" "failed: $1"; exit 1; }

# ---- 1. environment and build -------------------------------------------------------------------
log "mode $mode, budget ${budget}s$([ "$mode" = dry ] && echo ' (not enforced in a dry run)')"
torch_prefix="$("$py" -c 'import torch; print(torch.utils.cmake_prefix_path)')" ||
  fail "$py cannot import torch" setup
torch_version="$("$py" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda)')"
log "torch $torch_version at $torch_prefix"
# NCCL: the nvidia-nccl wheel torch depends on (only libnccl.so.2 there), else the CUDA toolkit's.
nccl_root="$("$py" -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null ||
  true)"
nvcc="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
[ -x "$nvcc" ] || fail "nvcc not found (PATH or /usr/local/cuda/bin)" setup
log "nvcc: $("$nvcc" --version | tail -1); NCCL from ${nccl_root:-the CUDA toolkit}"
log "$(g++ --version | head -1)"
command -v ninja >/dev/null || fail "ninja not found" setup
build_limit() { if [ "$mode" = dry ]; then echo 7200; else limit "$budget"; fi; }
log "configuring $build"
# shellcheck disable=SC2086
timeout -k 5 "$(build_limit)" cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DTorch_DIR="$torch_prefix/Torch" -DZT_WITH_CUDA=ON -DZT_REQUIRE_ALL_DEPS=OFF \
  -DZT_BUILD_TESTS=OFF -DZT_WERROR="${ZT_WERROR:-OFF}" -DCMAKE_CUDA_COMPILER="$nvcc" \
  ${nccl_root:+-DZT_NCCL_ROOT="$nccl_root"} ${ZT_GPU_CHECK_CMAKE_ARGS:-} >"$res/build.log" 2>&1 ||
  { tail -40 "$res/build.log"; fail "CMake configure failed (build.log)" build; }
grep -E "zerotorch:" "$res/build.log" | sed 's/^-- /  /'
log "building zt_cuda zt-gpu-checks zt-gpu-bench with $jobs jobs (limit $(build_limit)s)"
b0=$(date +%s)
timeout -k 5 "$(build_limit)" cmake --build "$build" --target zt_cuda zt-gpu-checks zt-gpu-bench \
  -j "$jobs" >>"$res/build.log" 2>&1 ||
  { grep -E "error|Error" "$res/build.log" | head -30
    fail "build failed or timed out (build.log)" build; }
status build ok $(( $(date +%s) - b0 ))
log "build done in $(( $(date +%s) - b0 )) s"

# ---- 2. the first GPU call ----------------------------------------------------------------------
if [ "$mode" = dry ]; then
  log "dry run: stopping before the first GPU call (zt-gpu-checks, zt-gpu-bench, gpt2_eager.py)"
  exit 0
fi
gpus="$(timeout 60 "$py" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)"
if [ "$gpus" = "0" ]; then
  log "no GPU visible to torch: stopping before the GPU checks and the benchmark"
  status gpu "none visible"
  exit 3
fi
log "GPU: $("$py" -c 'import torch; print(torch.cuda.get_device_name(0))')"
command -v nvidia-smi >/dev/null &&
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
export NCCL_DEBUG="${NCCL_DEBUG:-WARN}"  # NCCL's own reason lands in the logs

# run NAME CAP COMMAND...: one step with its own time limit (CAP, or what the deadline leaves),
# its output in NAME.log, its outcome in runs.tsv; skipped when under 20 s are left.
run() {
  local name="$1" cap="$2"; shift 2
  if [ "$(left)" -lt 20 ]; then
    log "skip $name: $(left) s left of the budget"; status "$name" "skipped: out of time"
    failures=$((failures + 1))
    return 1
  fi
  local lim s rc=0
  s=$(date +%s)
  lim=$(limit "$cap")
  log "$name (limit ${lim}s)"
  timeout -k 5 "$lim" "$@" >"$res/$name.log" 2>&1 || rc=$?
  local took=$(( $(date +%s) - s ))
  if [ "$rc" = 0 ]; then
    status "$name" ok "$took"
  else
    failures=$((failures + 1))
    local why="exit $rc"
    [ "$rc" = 124 ] || [ "$rc" = 137 ] && why="timed out after ${lim}s"
    status "$name" "failed: $why" "$took"
    log "  $name failed ($why):"; tail -3 "$res/$name.log" | sed 's/^/    /'
  fi
  return "$rc"
}

log "GPU checks"
failures=0
nccl_ok=1
run check_nccl 60 "$build/bin/zt-gpu-checks" --json "$res/checks.jsonl" nccl_one_rank || nccl_ok=0
cat "$res/check_nccl.log" 2>/dev/null
rest=(overflow_check fused_adam adam8bit)
# The engine checks need NCCL: after its failure they would only spend their timeouts.
[ "$nccl_ok" = 1 ] && rest+=(engine_equivalence engine_half)
run check_rest 150 "$build/bin/zt-gpu-checks" --json "$res/checks_rest.jsonl" "${rest[@]}"
cat "$res/check_rest.log" 2>/dev/null
cat "$res/checks_rest.jsonl" >>"$res/checks.jsonl" 2>/dev/null

# ---- 3. GPT-2 124M ------------------------------------------------------------------------------
common=(--batch "$batch" --seq 1024 --steps "$steps" --warmup 3 --peak-tflops "$peak"
        --json "$res/bench.jsonl")
zt_row() {  # dtype stage [offload [param-offload device: cpu|nvme]]
  local name="zt_$1_stage$2${3:+_offload}${4:+_param_$4}"
  if [ "$nccl_ok" = 0 ]; then
    log "skip $name: the one-rank NCCL check did not pass"
    status "$name" "skipped: NCCL check did not pass"
    failures=$((failures + 1))
    return
  fi
  run "$name" 90 "$build/bin/zt-gpu-bench" --dtype "$1" --stage "$2" ${3:+--offload} \
    ${4:+--offload-param "$4"} \
    --comm-timeout-s 60 "${common[@]}" && tail -1 "$res/$name.log"
}
eager_row() {  # dtype
  run "eager_$1" 90 "$py" "$root/bench/gpu/gpt2_eager.py" --dtype "$1" "${common[@]}" &&
    tail -1 "$res/eager_$1.log"
}
if [ "$mode" = quick ]; then
  zt_row bf16 3
else
  # Most telling first: when time runs short, the tail is what gets skipped.
  eager_row bf16
  zt_row bf16 0
  zt_row bf16 3
  zt_row bf16 2
  zt_row bf16 2 offload
  zt_row bf16 3 offload cpu
  zt_row bf16 3 offload nvme
  eager_row fp16
  zt_row fp16 0
  zt_row fp16 3
  zt_row fp16 2
  zt_row fp16 2 offload
fi
log "done in $(( $(date +%s) - t0 )) s; $failures step(s) failed or skipped"
[ "$failures" = 0 ]
