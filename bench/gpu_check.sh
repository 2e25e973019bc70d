#!/usr/bin/env bash
# bench/gpu_check.sh: the GPU proof of issue 13 in one run on a one-GPU machine (an H200 with
# PyTorch + CUDA in its python3, nvcc, CMake and ninja; no internet, no apt):
#   1. configures a reduced CUDA build against that python's torch (ZT_REQUIRE_ALL_DEPS=OFF:
#      MPI, gloo, yaml-cpp, Boost, spdlog, SentencePiece and GTest may all be missing) and builds
#      only the CUDA plugin, zt-gpu-checks and zt-gpu-bench (Release, ninja -j $ZT_JOBS, 16);
#   2. runs the GPU checks (tests/gpu: NCCL with one rank, kernels vs CPU references, the engine
#      on CUDA vs torch AdamW);
#   3. trains GPT-2 124M: zerotorch bf16 and fp16 at ZeRO stage 0, 2, 3 and 2 + optimizer
#      offload, and the plain PyTorch eager baseline (autocast, fused AdamW) in each dtype;
#   4. prints one table (bench/gpu/gpu_report.py): tokens/s, MFU (6 * params * tokens/s over
#      989 TFLOPS, the H100/H200 SXM dense bf16 peak; ZT_PEAK_TFLOPS overrides), peak memory.
# Results go to $OUT when set (else $build/gpu_check): build.log, checks.jsonl, bench.jsonl,
# one log per run, table.txt. Meant to finish within 8 minutes on an H200 including the build:
# every run has its own time limit, and a run that fails is reported, not fatal.
#
# --dry-run: stops after the build, before the first GPU call; so does a machine without a GPU
# (exit 3). Environment: PYTHON (python3), ZT_GPU_BUILD_DIR (build-gpu), ZT_JOBS (16),
# ZT_BENCH_STEPS (10), ZT_BENCH_BATCH (16), ZT_GPU_CHECK_CMAKE_ARGS (extra configure arguments).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ZT_GPU_BUILD_DIR:-$root/build-gpu}"
out="${OUT:-$build/gpu_check}"
py="${PYTHON:-python3}"
jobs="${ZT_JOBS:-16}"
steps="${ZT_BENCH_STEPS:-10}"
batch="${ZT_BENCH_BATCH:-16}"
peak="${ZT_PEAK_TFLOPS:-989}"
dry_run=0
[ "${1:-}" = "--dry-run" ] && dry_run=1
mkdir -p "$out" "$build"
t0=$(date +%s)
log() { echo "[gpu_check +$(( $(date +%s) - t0 ))s] $*"; }
die() { log "error: $*"; exit 1; }

# ---- 1. environment and build ------------------------------------------------------------------
torch_prefix="$("$py" -c 'import torch; print(torch.utils.cmake_prefix_path)')" ||
  die "$py cannot import torch"
log "torch $("$py" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda)') at $torch_prefix"
# NCCL: the nvidia-nccl wheel torch depends on (only libnccl.so.2 there), else the CUDA toolkit's.
nccl_root="$("$py" -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null || true)"
nvcc="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
[ -x "$nvcc" ] || die "nvcc not found (PATH or /usr/local/cuda/bin)"
log "nvcc: $("$nvcc" --version | tail -1); NCCL from ${nccl_root:-the CUDA toolkit}"
command -v ninja >/dev/null || die "ninja not found"
log "configuring $build (log: $out/build.log)"
# shellcheck disable=SC2086
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DTorch_DIR="$torch_prefix/Torch" -DZT_WITH_CUDA=ON -DZT_REQUIRE_ALL_DEPS=OFF \
  -DZT_BUILD_TESTS=OFF -DCMAKE_CUDA_COMPILER="$nvcc" \
  ${nccl_root:+-DZT_NCCL_ROOT="$nccl_root"} ${ZT_GPU_CHECK_CMAKE_ARGS:-} >"$out/build.log" 2>&1 ||
  { tail -40 "$out/build.log"; die "CMake configure failed"; }
grep -E "zerotorch:" "$out/build.log" | sed 's/^-- /  /'
log "building zt_cuda zt-gpu-checks zt-gpu-bench with $jobs jobs"
cmake --build "$build" --target zt_cuda zt-gpu-checks zt-gpu-bench -j "$jobs" >>"$out/build.log" 2>&1 ||
  { grep -E "error|Error" "$out/build.log" | head -30; die "build failed (log: $out/build.log)"; }
log "build done"

# ---- 2. the first GPU call ---------------------------------------------------------------------
if [ "$dry_run" = 1 ]; then
  log "dry run: stopping before the first GPU call (zt-gpu-checks, zt-gpu-bench, gpt2_eager.py)"
  exit 0
fi
gpus="$("$py" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)"
if [ "$gpus" = "0" ]; then
  log "no GPU visible to torch: stopping before the GPU checks and the benchmark"
  exit 3
fi
log "GPU: $("$py" -c 'import torch; print(torch.cuda.get_device_name(0))')"
"$nvcc" --version >/dev/null
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

log "GPU checks"
rm -f "$out/checks.jsonl" "$out/bench.jsonl"
timeout 240 "$build/bin/zt-gpu-checks" --json "$out/checks.jsonl" 2>&1 | tee "$out/checks.log"

# ---- 3. GPT-2 124M -----------------------------------------------------------------------------
common=(--batch "$batch" --seq 1024 --steps "$steps" --warmup 3 --peak-tflops "$peak" --json "$out/bench.jsonl")
bench() {  # name, command...
  local name="$1"; shift
  log "bench: $name"
  timeout 150 "$@" >"$out/$name.log" 2>&1 || { log "  $name failed (exit $?):"; tail -5 "$out/$name.log"; }
  tail -1 "$out/$name.log"
}
for dtype in bf16 fp16; do
  bench "eager_$dtype" "$py" "$root/bench/gpu/gpt2_eager.py" --dtype "$dtype" "${common[@]}"
  for stage in 0 2 3; do
    bench "zt_${dtype}_stage$stage" "$build/bin/zt-gpu-bench" --dtype "$dtype" --stage "$stage" "${common[@]}"
  done
  bench "zt_${dtype}_stage2_offload" "$build/bin/zt-gpu-bench" --dtype "$dtype" --stage 2 --offload "${common[@]}"
done

# ---- 4. the table ------------------------------------------------------------------------------
echo
"$py" "$root/bench/gpu/gpu_report.py" "$out/bench.jsonl" "$out/checks.jsonl" | tee "$out/table.txt"
log "done in $(( $(date +%s) - t0 )) s; results in $out"
