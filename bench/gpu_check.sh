#!/usr/bin/env bash
# bench/gpu_check.sh: the GPU proof in one short run on a one-GPU machine (an H200 with PyTorch +
# CUDA in its python3, nvcc, CMake and ninja; no internet, no apt). The window is short and rare,
# so one run must show every defect at once: no failure stops the steps after it.
#   1. configures a reduced CUDA build against that python's torch (ZT_REQUIRE_ALL_DEPS=OFF:
#      MPI, gloo, yaml-cpp, Boost, spdlog, SentencePiece and GTest may all be missing; ZT_WERROR
#      off, as that compiler is not CI's) and builds only the CUDA plugin, zt-gpu-checks and
#      zt-gpu-bench (Release, ninja -j $ZT_JOBS). When .gpu-deps/ holds yaml-cpp and Boost as
#      Debian packages (bench/gpu/fetch_config_deps.sh fetches them where apt works; the clone
#      carries them), they are unpacked into the build folder (dpkg -x) and the Python package
#      zerotorch is built too, on its own, so that its failure costs only the front-door rows;
#   2. runs the GPU checks (tests/gpu), each in a process of its own, so that a CUDA fault (a
#      sticky error, a segfault) ends only its check: the names come from `zt-gpu-checks --list`,
#      then `zt-gpu-checks NAME --json FILE` runs once per check under its own time limit. Each
#      check runs all its cases and names every failing one. Every check's JSON line goes to
#      checks.jsonl; a check that crashed or timed out before writing one gets a FAIL line written
#      here ("crashed (signal N, NAME)", "crashed (exit N)", "timed out after N s"), and one that
#      did not fit in the budget a FAIL line saying so;
#   3. trains GPT-2 124M: zerotorch bf16 and fp16 at ZeRO stage 0, 2, 3 and 2 + optimizer
#      offload (bf16 also stage 3 + optimizer offload with the parameter shards in pinned host
#      memory and on NVMe, offload_param cpu/nvme), the plain PyTorch eager baseline (autocast,
#      fused AdamW) in each dtype, the same step with the model under torch.compile (bf16),
#      zerotorch bf16 stage 0 with the loss tiled and with LibTorch's loss instead of the fused
#      cross-entropy kernel (the kernel's gain), bf16 stage 2 + optimizer offload with
#      check_grad_overflow false (the host steps during backward), and the Python front door: a torch.compile'd transformers GPT-2 through zerotorch.initialize at
#      bf16 stage 2 and 3 (bench/gpu/gpt2_front_door.py; skipped, and said why, without the
#      Python package). A run with a non-finite loss or no optimizer step fails (its row says
#      FAIL); one that died before printing a row gets a FAIL row written here;
#   4. prints one table (bench/gpu/gpu_report.py): every step's status, the checks with each
#      failing case, then tokens/s, MFU (6 * params * tokens/s over 989 TFLOPS, the H100/H200 SXM
#      dense bf16 peak; ZT_PEAK_TFLOPS overrides), peak memory and the ratios to eager and to
#      torch.compile, then the speed targets.
#
# Fits one short GPU window: everything runs against one deadline (ZT_GPU_CHECK_BUDGET_S from the
# start, build included: 570 s in full mode, 450 s otherwise); each step gets its own limit, cut
# to what is left, and steps that no longer fit are skipped and reported, most important first.
# It fails fast: NCCL and the benchmarks use 30-60 s communicator timeouts (not the library's 30
# minutes), and when the one-rank NCCL check hangs (times out), the engine checks and the
# zerotorch rows are skipped (each would hang until its own limit); any other NCCL failure skips
# nothing.
# Output: every file goes to one folder ($build/gpu_check: build.log, checks.jsonl, one log and
# JSON file per check, bench.jsonl, runs.tsv, one log per run, table.txt), packed at the end,
# whatever happened, into ONE archive: $OUT/gpu_check.tar.gz (else $build/gpu_check.tar.gz). The
# table is the last lines of stdout.
#
# Exit status: 0 when every step passed; 1 when one failed or was skipped (or the build failed);
# 3 without a GPU.
# Modes: --quick: build, every check (each in its own process) and two rows (zerotorch bf16 stage
#        3, and stage 3 with the optimizer offloaded and the parameter shards on NVMe), within the
#        same budget (under 8 minutes from a cold build on one H200).
#        --dry-run: on a machine without a GPU (a CPU-only one with the project's full
#        dependencies): builds as above, without what the GPU image lacks (spdlog,
#        SentencePiece; yaml-cpp and Boost from .gpu-deps/ when it is there), plus the
#        host-backed test device, then runs every check (each in its own process, as on the
#        GPU) on that device (`zt-gpu-checks --device zttest`: the placement, copy and offload
#        paths against the same references; the checks of CUDA kernels SKIP), then builds
#        the GPU programs once more without yaml-cpp and Boost (what a GPU machine without
#        .gpu-deps/ builds; build_noconfig.log), and stops before the training rows. The builds
#        have no deadline (a slow machine); the checks have the budget from the build's end.
#        Without --dry-run, a machine without a GPU stops after the build (exit 3).
# Environment: PYTHON (python3), ZT_GPU_BUILD_DIR (build-gpu), ZT_JOBS (16), ZT_BENCH_STEPS (10),
# ZT_BENCH_BATCH (16), ZT_GPU_CHECK_BUDGET_S (570 / 450), ZT_WERROR (OFF), ZT_GPU_CHECK_CMAKE_ARGS
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
budget="${ZT_GPU_CHECK_BUDGET_S:-}"
mode=full
for arg in "$@"; do
  case "$arg" in
    --dry-run) mode=dry ;;
    --quick) [ "$mode" = dry ] || mode=quick ;;
    *) echo "usage: $0 [--quick | --dry-run]" >&2; exit 2 ;;
  esac
done
# The full mode's rows take about two minutes more than --quick's (two of them compile).
[ -n "$budget" ] || { [ "$mode" = full ] && budget=570 || budget=450; }
rm -rf "$res"
mkdir -p "$res" "$(dirname "$archive")"
t0=$(date +%s)
deadline=$((t0 + budget))
failures=0
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
# yaml-cpp and Boost.Program_options carried as Debian packages (bench/gpu/fetch_config_deps.sh
# put them in .gpu-deps/): unpacked here, nothing installed, for the config reader and the Python
# package. Without them the build has neither, and the front-door rows are skipped.
deps_args=() carried=0
if compgen -G "$root/.gpu-deps/*.deb" >/dev/null; then
  if command -v dpkg >/dev/null; then
    rm -rf "$build/deps" && mkdir -p "$build/deps"
    for deb in "$root"/.gpu-deps/*.deb; do dpkg -x "$deb" "$build/deps"; done
    cmake_dir="$(dirname "$(find "$build/deps" -path '*/cmake/yaml-cpp' -type d | head -1)")"
    deps_args=(-Dyaml-cpp_DIR="$cmake_dir/yaml-cpp"
               -DBoost_DIR="$(find "$cmake_dir" -maxdepth 1 -name 'Boost-*' | head -1)")
    carried=1
    log "yaml-cpp and Boost from .gpu-deps/ (unpacked into $build/deps)"
  else
    log "warning: .gpu-deps/ holds packages but dpkg is missing: no config reader, no Python"
  fi
fi
# A dry run also builds the test device (ZT_BUILD_TESTS) that its checks run on, and leaves out
# what the GPU image lacks (spdlog, SentencePiece), so that a build only such a machine would fail
# fails here first. It keeps MPI and gloo (the checks' collectives on the test device go through
# one of them) and yaml-cpp and Boost (the test device's driver is in zt_train, which needs the
# config): those from .gpu-deps/ when it is there, as on the GPU machine.
# Every switch is given each time (OFF too), since the build folder's cache keeps them.
dry_tests=OFF dry_targets=() leave_out=OFF
if [ "$mode" = dry ]; then
  dry_tests=ON dry_targets=(zt_testdevice) leave_out=ON
fi
deps_args+=(-DCMAKE_DISABLE_FIND_PACKAGE_spdlog=$leave_out
            -DCMAKE_DISABLE_FIND_PACKAGE_SentencePiece=$leave_out
            -DCMAKE_DISABLE_FIND_PACKAGE_yaml-cpp=OFF -DCMAKE_DISABLE_FIND_PACKAGE_Boost=OFF)
# configure_and_build [DIR LOG]: the reduced build of the GPU programs in DIR ($build), its output
# in LOG (build.log).
configure_and_build() {
  local dir="${1:-$build}" out="$res/${2:-build.log}"
  log "configuring $dir"
  # shellcheck disable=SC2086
  timeout -k 5 "$(build_limit)" cmake -S "$root" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DTorch_DIR="$torch_prefix/Torch" -DZT_WITH_CUDA=ON -DZT_REQUIRE_ALL_DEPS=OFF \
    -DZT_PYTHON="$(command -v "$py")" "${deps_args[@]}" \
    -DZT_BUILD_TESTS="$dry_tests" -DZT_WERROR="${ZT_WERROR:-OFF}" -DCMAKE_CUDA_COMPILER="$nvcc" \
    ${nccl_root:+-DZT_NCCL_ROOT="$nccl_root"} ${ZT_GPU_CHECK_CMAKE_ARGS:-} >>"$out" 2>&1 ||
    { tail -40 "$out"; log "CMake configure failed ($out)"; return 1; }
  grep -E "zerotorch:" "$out" | sed 's/^-- /  /'
  log "building zt_cuda zt-gpu-checks zt-gpu-bench ${dry_targets[*]} with $jobs jobs" \
    "(limit $(build_limit)s)"
  timeout -k 5 "$(build_limit)" cmake --build "$dir" --target zt_cuda zt-gpu-checks \
    zt-gpu-bench "${dry_targets[@]}" -j "$jobs" >>"$out" 2>&1 ||
    { grep -E "error|Error" "$out" | head -30; log "build failed or timed out"; return 1; }
}
b0=$(date +%s)
config_deps_failed=0
: >"$res/build.log"
if ! configure_and_build; then
  [ "$carried" = 1 ] || fail "build failed or timed out (build.log)" build
  # With yaml-cpp and Boost more of the libraries compile (the config reader, checkpoints, the
  # training run), with a compiler CI does not use: when that fails, the GPU programs are built
  # without them rather than not at all.
  log "retrying the build without yaml-cpp and Boost (the Python rows will be skipped)"
  mv "$res/build.log" "$res/build_with_config_deps.log"
  deps_args=(-Uyaml-cpp_DIR -UBoost_DIR -Uboost_program_options_DIR
             -DCMAKE_DISABLE_FIND_PACKAGE_spdlog=$leave_out
             -DCMAKE_DISABLE_FIND_PACKAGE_SentencePiece=$leave_out
             -DCMAKE_DISABLE_FIND_PACKAGE_yaml-cpp=ON -DCMAKE_DISABLE_FIND_PACKAGE_Boost=ON)
  configure_and_build || fail "build failed or timed out (build.log)" build
  status build_with_config_deps "failed: build_with_config_deps.log"
  failures=$((failures + 1))
  config_deps_failed=1
fi
status build ok $(( $(date +%s) - b0 ))
log "build done in $(( $(date +%s) - b0 )) s"
# The Python package, for the front-door rows (full mode only: --quick and --dry-run have none): a
# build of its own, so that its failure costs those rows only. python_why says why there are none.
python_why=""
if [ "$mode" != full ]; then
  python_why="no front-door rows in this mode"
elif [ "$config_deps_failed" = 1 ]; then
  python_why="the build with yaml-cpp and Boost failed (build_with_config_deps.log)"
  status python "skipped: build with yaml-cpp and Boost failed"
elif ! grep -q "^build zt_python:" "$build/build.ninja"; then
  python_why="no Python package in this build (yaml-cpp/Boost: run bench/gpu/fetch_config_deps.sh"
  python_why+=" and carry .gpu-deps/; or no Python headers)"
  log "$python_why"
  status python "skipped: not configured"
else
  b0=$(date +%s)
  log "building zt_python (limit $(build_limit)s)"
  if timeout -k 5 "$(build_limit)" cmake --build "$build" --target zt_python -j "$jobs" \
      >"$res/build_python.log" 2>&1; then
    status python ok $(( $(date +%s) - b0 ))
  else
    grep -E "error|Error" "$res/build_python.log" | head -10
    python_why="the Python package failed to build (build_python.log)"
    status python "failed: build"
    failures=$((failures + 1))
  fi
fi

# ---- 2. the check names (no GPU needed), then the first GPU call --------------------------------
checks_bin="$build/bin/zt-gpu-checks"
check_names=()
list_checks() {
  local out rc=0
  out="$(timeout -k 5 60 "$checks_bin" --list 2>"$res/check_list.log")" || rc=$?
  if [ "$rc" != 0 ] || [ -z "$out" ]; then
    log "error: zt-gpu-checks --list failed (exit $rc): $(tail -1 "$res/check_list.log")"
    return 1
  fi
  local line
  while IFS= read -r line; do
    # Names become file names here: anything else on stdout is not a check.
    if [[ "$line" =~ ^[a-z0-9_]+$ ]]; then
      check_names+=("$line")
    else
      log "warning: zt-gpu-checks --list printed '$line', which is not a check name"
    fi
  done <<<"$out"
  [ "${#check_names[@]}" -gt 0 ] || { log "error: zt-gpu-checks --list named no check"; return 1; }
  log "${#check_names[@]} GPU checks: ${check_names[*]}"
}
# The checks' device: cuda:0, or in a dry run the test device (and the budget starts now).
check_device=()
if [ "$mode" = dry ]; then
  check_device=(--device zttest)
  deadline=$(( $(date +%s) + budget ))
  log "dry run: the checks run on the host-backed test device; no GPU call, no training rows"
fi
gpus="$(timeout 60 "$py" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)"
if [ "$gpus" = "0" ] && [ "$mode" != dry ]; then
  log "no GPU visible to torch: stopping before the GPU checks and the benchmark"
  status gpu "none visible"
  exit 3
fi
if [ "$mode" != dry ]; then
  log "GPU: $(timeout 60 "$py" -c 'import torch; print(torch.cuda.get_device_name(0))')"
  command -v nvidia-smi >/dev/null &&
    timeout 30 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
fi
export NCCL_DEBUG="${NCCL_DEBUG:-WARN}"  # NCCL's own reason lands in the logs
run_reserve=0

# exit_reason RC LIMIT SECONDS: why a command under `timeout -k 5 LIMIT` ended with RC.
exit_reason() {
  local rc="$1" lim="$2" took="$3"
  if [ "$rc" = 124 ] || { [ "$rc" = 137 ] && [ "$took" -ge "$lim" ]; }; then
    echo "timed out after ${lim}s"
  elif [ "$rc" -gt 128 ]; then
    echo "crashed (signal $((rc - 128)), $(kill -l $((rc - 128)) 2>/dev/null || echo '?'))"
  else
    echo "crashed (exit $rc)"
  fi
}

# run NAME CAP COMMAND...: one step with its own time limit (CAP, or what the deadline leaves
# after run_reserve seconds kept for the steps that must follow, but at least 20 s), its output in
# NAME.log, its outcome in runs.tsv; skipped when under 20 s are left. Sets run_ran
# (0 when skipped), run_took, and run_why: "" when it passed, else why it ended, as the caller
# writes it for a command that died before reporting anything itself.
run() {
  local name="$1" cap="$2"; shift 2
  run_why="" run_took=0 run_ran=0
  if [ "$(left)" -lt 20 ]; then
    run_why="not run: out of time ($(left) s of the budget left)"
    log "skip $name: $(left) s left of the budget"; status "$name" "skipped: out of time"
    failures=$((failures + 1))
    return 1
  fi
  local lim s rc=0 room
  s=$(date +%s)
  lim=$(limit "$cap")
  room=$(( $(left) - run_reserve ))
  [ "$room" -lt 20 ] && room=20
  [ "$lim" -gt "$room" ] && lim=$room
  log "$name (limit ${lim}s)"
  run_ran=1
  timeout -k 5 "$lim" "$@" >"$res/$name.log" 2>&1 || rc=$?
  run_took=$(( $(date +%s) - s ))
  if [ "$rc" = 0 ]; then
    status "$name" ok "$run_took"
    return 0
  fi
  failures=$((failures + 1))
  run_why="$(exit_reason "$rc" "$lim" "$run_took")"
  # Exit 1 is also how zt-gpu-checks and zt-gpu-bench report a failure they have written down.
  local shown="$run_why"
  [ "$rc" = 1 ] && shown="exit 1"
  status "$name" "failed: $shown" "$run_took"
  log "  $name failed ($shown):"; tail -3 "$res/$name.log" | sed 's/^/    /'
  return "$rc"
}

# "; last output: LINE" with the last line step NAME printed (200 characters), for a reason
# written on its behalf; nothing when it printed nothing.
last_output() {
  local line
  line="$(grep -v '^[[:space:]]*$' "$res/$1.log" 2>/dev/null | tail -1 | cut -c1-200)"
  [ -n "$line" ] && echo "; last output: $line"
}

# json_line FIELD VALUE ...: one JSON object (strings, except true/false/numbers) on stdout.
json_line() {
  "$py" -c '
import json, sys
a = sys.argv[1:]
def value(v):
    if v in ("true", "false"):
        return v == "true"
    try:
        return int(v)
    except ValueError:
        try:
            return float(v)
        except ValueError:
            return v
print(json.dumps({a[i]: value(a[i + 1]) for i in range(0, len(a), 2)}))' "$@"
}

# ---- 3. the GPU checks, one process each --------------------------------------------------------
# Caps: the kernels take seconds; an engine check builds one engine (and one NCCL communicator)
# per case.
check_cap() {
  case "$1" in
    nccl_one_rank) echo 60 ;;
    engine_*) echo 120 ;;
    *) echo 60 ;;
  esac
}
# check NAME: one check in its own process. Its JSON line goes to checks.jsonl; when it wrote
# none (crashed, timed out, not run), a FAIL line saying why goes there instead.
check() {
  local name="$1" json="$res/check_$1.json"
  if [ "$nccl_hung" = 1 ] && [[ "$name" == engine_* ]]; then
    log "skip check_$name: the one-rank NCCL check timed out"
    status "check_$name" "skipped: NCCL check timed out"
    failures=$((failures + 1))
    json_line check "$name" pass false seconds 0 \
      error "not run: the nccl_one_rank check timed out (NCCL hangs)" >>"$res/checks.jsonl"
    return
  fi
  rm -f "$json"
  run "check_$name" "$(check_cap "$name")" "$checks_bin" "$name" --json "$json" \
    "${check_device[@]}"
  if [ -s "$json" ]; then
    cat "$json" >>"$res/checks.jsonl"
  else
    local why="$run_why"
    [ "$run_ran" = 1 ] && why="$why$(last_output "check_$name")"
    json_line check "$name" pass false seconds "$run_took" error "$why" >>"$res/checks.jsonl"
  fi
  # A failure's lines are in run's log tail already.
  [ -z "$run_why" ] && grep -E "^$name +(PASS|SKIP) " "$res/check_$name.log" | sed 's/^/  /'
  [ "$name" = nccl_one_rank ] && [[ "$run_why" == "timed out"* ]] && nccl_hung=1
  return 0
}

log "GPU checks"
nccl_hung=0
: >"$res/checks.jsonl"
if list_checks; then
  status check_list ok
  # A hung check must not starve the ones after it: each keeps 20 s for every later check (and
  # --quick 120 s for its two training rows).
  row_reserve=0
  [ "$mode" = quick ] && row_reserve=120
  for i in "${!check_names[@]}"; do
    run_reserve=$(( 20 * (${#check_names[@]} - i - 1) + row_reserve ))
    check "${check_names[$i]}"
  done
  run_reserve=0
else
  status check_list "failed: zt-gpu-checks --list"
  failures=$((failures + 1))
fi

if [ "$mode" = dry ]; then
  # What a GPU machine without .gpu-deps/ builds: the GPU programs without yaml-cpp and Boost, in
  # a folder of its own. Built only: their test-device driver needs zt_train, which needs both.
  deps_args=(-DCMAKE_DISABLE_FIND_PACKAGE_spdlog=ON -DCMAKE_DISABLE_FIND_PACKAGE_SentencePiece=ON
             -DCMAKE_DISABLE_FIND_PACKAGE_yaml-cpp=ON -DCMAKE_DISABLE_FIND_PACKAGE_Boost=ON)
  dry_tests=OFF dry_targets=()
  b0=$(date +%s)
  : >"$res/build_noconfig.log"
  if configure_and_build "$build/noconfig" build_noconfig.log; then
    status build_noconfig ok $(( $(date +%s) - b0 ))
  else
    status build_noconfig "failed: build_noconfig.log" $(( $(date +%s) - b0 ))
    failures=$((failures + 1))
  fi
  log "dry run done in $(( $(date +%s) - t0 )) s; $failures step(s) failed or skipped"
  [ "$failures" = 0 ]
  exit
fi

# ---- 4. GPT-2 124M ------------------------------------------------------------------------------
common=(--batch "$batch" --seq 1024 --steps "$steps" --warmup 3 --peak-tflops "$peak"
        --json "$res/bench.jsonl")
touch "$res/bench.jsonl"
# bench NAME IMPL DTYPE CAP COMMAND...: one training run; when it ran but printed no row (it
# crashed or timed out), a FAIL row saying why goes to bench.jsonl instead.
bench() {
  local name="$1" impl="$2" dtype="$3" cap="$4" before
  shift 4
  before=$(wc -l <"$res/bench.jsonl")
  if run "$name" "$cap" "$@"; then
    tail -1 "$res/$name.log"
  elif [ "$run_ran" = 1 ] && [ "$(wc -l <"$res/bench.jsonl")" = "$before" ]; then
    json_line name "$name" impl "$impl" dtype "$dtype" ok false \
      error "$run_why$(last_output "$name")" >>"$res/bench.jsonl"
  fi
}
zt_row() {  # dtype stage [offload [param-offload device: cpu|nvme]] [--loss-tile N]
            # [--unfused-loss] [--no-overflow-check]
  local tile=() unfused=() unchecked=() pos=()
  while [ $# -gt 0 ]; do
    case "$1" in
      --loss-tile) tile=(--loss-tile "$2"); shift 2 ;;
      --unfused-loss) unfused=(--unfused-loss); shift ;;
      --no-overflow-check) unchecked=(--no-overflow-check); shift ;;
      *) pos+=("$1"); shift ;;
    esac
  done
  set -- "${pos[@]}"
  local name="zt_$1_stage$2${3:+_offload}${4:+_param_$4}${tile[1]:+_loss_tile_${tile[1]}}"
  name="$name${unfused[0]:+_unfused_loss}${unchecked[0]:+_unchecked}"
  if [ "$nccl_hung" = 1 ]; then
    log "skip $name: the one-rank NCCL check timed out"
    status "$name" "skipped: NCCL check timed out"
    failures=$((failures + 1))
    return
  fi
  bench "$name" zerotorch "$1" 90 "$build/bin/zt-gpu-bench" --dtype "$1" --stage "$2" \
    ${3:+--offload --breakdown} ${4:+--offload-param "$4"} "${tile[@]}" "${unfused[@]}" \
    "${unchecked[@]}" --comm-timeout-s 60 "${common[@]}"
}
eager_row() {  # dtype [--compile]
  local name="eager_$1" impl=pytorch-eager cap=90
  [ "${2:-}" = --compile ] && name="compile_$1" impl=pytorch-compile cap=240
  bench "$name" "$impl" "$1" "$cap" "$py" "$root/bench/gpu/gpt2_eager.py" --dtype "$1" ${2:-} \
    "${common[@]}"
}
# The Python front door: a torch.compile'd transformers GPT-2 through zerotorch.initialize.
front_row() {  # dtype stage [offload]
  local name="python_$1_stage$2${3:+_offload}"
  if [ -n "$python_why" ] || [ "$nccl_hung" = 1 ]; then
    local why="${python_why:-the one-rank NCCL check timed out}"
    log "skip $name: $why"
    status "$name" "skipped: ${why%% (*}"
    failures=$((failures + 1))
    return
  fi
  PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}" bench "$name" zerotorch-python "$1" 240 \
    "$py" "$root/bench/gpu/gpt2_front_door.py" --dtype "$1" --stage "$2" ${3:+--offload} \
    "${common[@]}"
}
if [ "$mode" = quick ]; then
  zt_row bf16 3
  # The parameter shards in files, through the pread/pwrite path the sandbox leaves (no io_uring):
  # its teardown once crashed there (base/remove_tree.h).
  zt_row bf16 3 offload nvme
else
  # Most telling first: when time runs short, the tail is what gets skipped.
  eager_row bf16
  eager_row bf16 --compile
  zt_row bf16 0
  zt_row bf16 3
  front_row bf16 2
  front_row bf16 3
  # The head and the loss 256 positions of each row at a time: the logits never whole.
  zt_row bf16 0 --loss-tile 256
  # The loss through LibTorch's ops instead of the fused cross-entropy kernel: the kernel's gain.
  zt_row bf16 0 --unfused-loss
  zt_row bf16 2
  zt_row bf16 2 offload
  # bf16.check_grad_overflow false: each bucket's host step runs during backward.
  zt_row bf16 2 offload --no-overflow-check
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
