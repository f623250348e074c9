#!/usr/bin/env bash
# The whole test suite from a fresh Debian 12 machine: installs what is missing, builds, and runs
# every test under ctest (C++ unit and gradient checks, PyTorch parity, safetensors differential).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
scripts/install-deps.sh
WERROR=OFF; [ "${CI:-}" = "true" ] && WERROR=ON
scripts/build.sh -DNORMLAB_WERROR=$WERROR
ctest --test-dir build --output-on-failure -j "${JOBS:-$(nproc)}" "$@"
echo "[test] total wall time $(( $(date +%s) - start )) s"
