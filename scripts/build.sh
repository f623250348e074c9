#!/usr/bin/env bash
# Configures and builds normlab into $BUILD_DIR (default build/, Release). Extra arguments go to
# cmake. Options given here override the values cached by an earlier configure; options not given
# keep them (so a caller that needs one, e.g. NORMLAB_TESTS, must pass it).
# NORMLAB_CONFIGURE_ONLY=1 stops after configuring (tests/scripts/test_build_sequence.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
BUILD_DIR=${BUILD_DIR:-build}
PYARG=()
[ -x .venv/bin/python ] && PYARG=(-DPython3_EXECUTABLE="$PWD/.venv/bin/python")
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DNORMLAB_MPI=ON "${PYARG[@]}" "$@" >/dev/null
[ "${NORMLAB_CONFIGURE_ONLY:-0}" = "1" ] && exit 0
cmake --build "$BUILD_DIR" -j "$JOBS"
