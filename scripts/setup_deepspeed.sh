#!/usr/bin/env bash
# Creates (idempotently) a virtualenv with DeepSpeed for the Python-model peer benchmark
# (bench/peers/python_peers.py). The DeepSpeed venv does not install torch: a .pth file puts the
# project venv's site-packages on its path, so torch and transformers are the project's own.
#
#   ZT_VENV     project venv with torch (default: ~/.cache/zerotorch/venv-torch-2.11.0)
#   ZT_DS_VENV  DeepSpeed venv to create (default: ~/.cache/zerotorch/venv-deepspeed)
#   ZT_DS_VERSION  pip requirement spec for deepspeed (default: 0.19.*)
#
# DeepSpeed is built from its sdist with DS_BUILD_OPS=0: no op is compiled at install time; ops
# (DeepSpeedCPUAdam for offload_optimizer) JIT-build with ninja on first use, into
# TORCH_EXTENSIONS_DIR (default ~/.cache/torch_extensions). Runs use DS_ACCELERATOR=cpu.
# Rerunning when everything is present takes seconds.
set -euo pipefail

TORCH_VERSION="${ZT_TORCH_VERSION:-2.11.0}"
CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/zerotorch"
ZT_VENV="${ZT_VENV:-$CACHE_ROOT/venv-torch-$TORCH_VERSION}"
ZT_DS_VENV="${ZT_DS_VENV:-$CACHE_ROOT/venv-deepspeed}"
DS_SPEC="${ZT_DS_VERSION:-0.19.*}"

say() { echo "[setup-deepspeed] $*"; }

if [ ! -x "$ZT_VENV/bin/python" ]; then
  echo "[setup-deepspeed] error: project venv $ZT_VENV missing; run scripts/setup.sh first" >&2
  exit 1
fi
base_site="$("$ZT_VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"

# 1. The venv, made with the same base interpreter as the project venv (same ABI as its wheels).
if [ ! -x "$ZT_DS_VENV/bin/python" ]; then
  base_py="$("$ZT_VENV/bin/python" -c 'import sys; print(sys._base_executable)')"
  say "creating $ZT_DS_VENV with $base_py"
  mkdir -p "$(dirname "$ZT_DS_VENV")"
  "$base_py" -m venv "$ZT_DS_VENV"
fi
py="$ZT_DS_VENV/bin/python"
ds_site="$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
pth="$ds_site/zz_zerotorch_project_venv.pth"
if [ ! -f "$pth" ] || [ "$(cat "$pth")" != "$base_site" ]; then
  # "zz_" sorts last, and .pth entries are appended to sys.path: packages installed in this venv
  # win over the project venv's.
  echo "$base_site" >"$pth"
  say "linked project site-packages $base_site"
fi
"$py" -c "import torch, transformers; print('[setup-deepspeed] torch', torch.__version__, 'transformers', transformers.__version__, 'from', torch.__file__)"

# 2. DeepSpeed's own requirements (requirements/requirements.txt of 0.19: einops, hjson, msgpack,
#    ninja, numpy, packaging>=20.0, psutil, py-cpuinfo, pydantic>=2.0.0, torch, tqdm), without
#    torch. Only what is not importable already (from either venv) is installed.
declare -A MODS=([einops]=einops [hjson]=hjson [msgpack]=msgpack [ninja]=ninja [numpy]=numpy
  [packaging]=packaging [psutil]=psutil [py-cpuinfo]=cpuinfo [pydantic]=pydantic [tqdm]=tqdm
  [wheel]=wheel [setuptools]=setuptools)
need=()
for pkg in "${!MODS[@]}"; do
  "$py" -c "import ${MODS[$pkg]}" 2>/dev/null || need+=("$pkg")
done
# The JIT build runs the `ninja` executable, which must be on PATH (torch looks for it).
if ! [ -x "$ZT_DS_VENV/bin/ninja" ] && ! command -v ninja >/dev/null; then
  need+=(ninja)
fi
if [ "${#need[@]}" -gt 0 ]; then
  say "installing DeepSpeed's requirements: ${need[*]}"
  "$py" -m pip install --quiet "${need[@]}"
else
  say "DeepSpeed's requirements: all present"
fi

# 3. DeepSpeed itself, from the sdist, no ops prebuilt.
if DS_ACCELERATOR=cpu "$py" -c "import deepspeed, sys; from packaging.specifiers import SpecifierSet; sys.exit(0 if deepspeed.__version__.split('+')[0] in SpecifierSet('==$DS_SPEC') else 1)" 2>/dev/null; then
  say "deepspeed present"
else
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  say "downloading deepspeed==$DS_SPEC sdist"
  if ! "$py" -m pip download --quiet --no-deps --no-binary :all: -d "$tmp" "deepspeed==$DS_SPEC"; then
    say "no deepspeed==$DS_SPEC on the index; taking the newest available"
    "$py" -m pip download --quiet --no-deps --no-binary :all: -d "$tmp" deepspeed
  fi
  sdist="$(ls "$tmp"/deepspeed-*.tar.gz)"
  say "installing $(basename "$sdist") (DS_BUILD_OPS=0, ops JIT-build at first use)"
  DS_BUILD_OPS=0 DS_ACCELERATOR=cpu "$py" -m pip install --quiet --no-deps --no-build-isolation "$sdist"
fi

DS_ACCELERATOR=cpu "$py" -c "import deepspeed; print('[setup-deepspeed] deepspeed', deepspeed.__version__, 'accelerator', deepspeed.get_accelerator()._name)"

# 4. JIT-build DeepSpeedCPUAdam now (once; cached in TORCH_EXTENSIONS_DIR), so that the first
#    offload run does not pay for it. ZT_DS_SKIP_JIT=1 skips it.
if [ "${ZT_DS_SKIP_JIT:-0}" != 1 ]; then
  say "loading (JIT-building on first use) DeepSpeed's CPUAdam op"
  start=$(date +%s)
  PATH="$PATH:$ZT_DS_VENV/bin" DS_ACCELERATOR=cpu "$py" -c "from deepspeed.ops.op_builder import CPUAdamBuilder; CPUAdamBuilder().load(verbose=False)" 2>&1 | grep -vE '^\s*$' | tail -5
  say "CPUAdam op ready in $(( $(date +%s) - start )) s"
fi
say "done: $ZT_DS_VENV (run with DS_ACCELERATOR=cpu; PATH needs a ninja, else append $ZT_DS_VENV/bin)"
