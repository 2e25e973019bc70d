#!/usr/bin/env bash
# Installs everything zerotorch needs on a fresh Debian 12 machine (run as root), idempotently:
#  - Debian packages: compilers, CMake, OpenMPI, yaml-cpp, Boost.Program_options, GoogleTest,
#    spdlog/fmt, liburing (NVMe offload I/O), SentencePiece, ccache, iproute2, and the
#    public-domain corpora used by examples;
#  - LibTorch from the PyPI torch wheel, in a virtualenv keyed by the torch version in a per-user
#    cache outside the clone (ZT_VENV overrides), so fresh clones reuse it.
# Rerunning when nothing is missing takes seconds. Prints what it does.
set -euo pipefail

TORCH_VERSION="${ZT_TORCH_VERSION:-2.11.0}"
CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/zerotorch"
ZT_VENV="${ZT_VENV:-$CACHE_ROOT/venv-torch-$TORCH_VERSION}"

say() { echo "[setup] $*"; }

APT_PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git clang-format
  python3 python3-venv python3-pip python3-dev
  openmpi-bin libopenmpi-dev
  libyaml-cpp-dev libboost-program-options-dev
  libgtest-dev libgmock-dev libgloo-dev
  libspdlog-dev libfmt-dev liburing-dev
  libsentencepiece-dev sentencepiece
  iproute2 procps
  slurmd slurmctld slurm-client munge
  bible-kjv bible-kjv-text fortunes fortunes-min
)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "[setup] error: missing Debian packages (${missing[*]}) and not root; run as root" >&2
    exit 1
  fi
  say "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  say "Debian packages: all ${#APT_PACKAGES[@]} present"
fi

# The wheel's libtorch_cuda.so needs cuFile, cuSPARSELt and NVSHMEM, which the wheel's own pip
# dependencies provide, so torch is installed with its dependencies.
py="$ZT_VENV/bin/python"
if [ -x "$py" ] && "$py" -c "import torch, sys; sys.exit(0 if torch.__version__.split('+')[0] == '$TORCH_VERSION' else 1)" 2>/dev/null; then
  say "torch $TORCH_VERSION present in $ZT_VENV"
else
  say "creating virtualenv $ZT_VENV and installing torch==$TORCH_VERSION (a few GB, once per machine)"
  mkdir -p "$(dirname "$ZT_VENV")"
  python3 -m venv "$ZT_VENV"
  "$ZT_VENV/bin/pip" install --quiet --upgrade pip
  "$ZT_VENV/bin/pip" install --quiet "torch==$TORCH_VERSION"
fi
# Small Python extras for interop checks and plots (numpy memmap, safetensors, matplotlib), and
# tensorboard, whose reader checks the event files train/monitor writes, and transformers, whose
# GPT2LMHeadModel checks the GPT example's Hugging Face export and import (models/gpt/hf_gpt2.h)
# and whose Trainer (with accelerate, which it needs) runs on the engine (python/zerotorch/hf.py),
# and pytest, which runs the Python package's tests (tests/unit/python), and wheel, with which
# `pip install --no-build-isolation ./python` builds the package (python/setup.py). transformers
# and accelerate are pinned: zerotorch.hf overrides parts of their Trainer.
TRANSFORMERS_VERSION=5.25.0
ACCELERATE_VERSION=1.16.0
if ! "$py" -c "import numpy, safetensors, matplotlib, tensorboard, transformers, accelerate, pytest, wheel
assert transformers.__version__ == '$TRANSFORMERS_VERSION', transformers.__version__
assert accelerate.__version__ == '$ACCELERATE_VERSION', accelerate.__version__" 2>/dev/null; then
  say "installing numpy, safetensors, matplotlib, tensorboard, transformers==$TRANSFORMERS_VERSION," \
    "accelerate==$ACCELERATE_VERSION, pytest, wheel into $ZT_VENV"
  "$ZT_VENV/bin/pip" install --quiet numpy safetensors matplotlib tensorboard \
    "transformers==$TRANSFORMERS_VERSION" "accelerate==$ACCELERATE_VERSION" pytest wheel
fi
say "done: Torch CMake prefix $("$py" -c 'import torch; print(torch.utils.cmake_prefix_path)')"
