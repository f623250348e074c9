#!/usr/bin/env bash
# Configures and builds normlab into build/ (Release). Extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
PYARG=()
[ -x .venv/bin/python ] && PYARG=(-DPython3_EXECUTABLE="$PWD/.venv/bin/python")
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DNORMLAB_MPI=ON "${PYARG[@]}" "$@" >/dev/null
cmake --build build -j "$JOBS"
