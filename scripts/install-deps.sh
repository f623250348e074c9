#!/usr/bin/env bash
# Installs what normlab needs on Debian 12: the C++ toolchain and libraries from Debian (with clang
# and its libFuzzer/sanitizer runtimes, for the fuzz targets in tests/fuzz), and the Python side
# of the tests (PyTorch 2.13 CPU, safetensors, transformers, tokenizers, sentencepiece, tiktoken,
# pytest) into .venv, with nanobind and scikit-build-core for the Python package (python/).
# Idempotent: skips whatever is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(build-essential cmake ninja-build pkg-config libopenblas-dev libtomlplusplus-dev
  nlohmann-json3-dev libcli11-dev libfmt-dev libgtest-dev libpcre2-dev libutf8proc-dev
  libsentencepiece-dev openmpi-bin libopenmpi-dev python3 python3-dev python3-venv python3-pip
  clang libclang-rt-14-dev chromium)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "[install] apt-get install ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ "${NORMLAB_SKIP_PYTHON:-0}" != "1" ]; then
  PY=${PYTHON:-python3}
  if [ ! -x .venv/bin/python ]; then
    echo "[install] creating .venv"
    "$PY" -m venv .venv
  fi
  if ! .venv/bin/python -c "import torch, safetensors, pytest, numpy, transformers, tokenizers, sentencepiece, tiktoken, nanobind, scikit_build_core, tqdm, optimi, adam_atan2_pytorch, tensorboard, yaml, mup, x_transformers, nGPT_pytorch, admin_torch, accelerate, lightning" 2>/dev/null; then
    echo "[install] pip install -r requirements-test.txt (PyTorch 2.13 CPU build)"
    .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements-test.txt
    # μP's reference without its unpinned torch/torchvision requirement (requirements-test.txt)
    .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps mup==1.0.0
  fi
fi
