#!/usr/bin/env bash
# The README's first command: installs what is missing (Debian packages), builds normlab, and runs
# the main job: post-, pre- and peri-norm trained on the embedded corpus, compared in a table.
# BUILD_DIR (default build/) is where it builds.
set -euo pipefail
cd "$(dirname "$0")/.."
export BUILD_DIR=${BUILD_DIR:-build}
start=$(date +%s)
NORMLAB_SKIP_PYTHON=1 scripts/install-deps.sh
scripts/build.sh -DNORMLAB_TESTS=OFF
"$BUILD_DIR"/normlab compare --config configs/compare.toml --out runs/compare "$@"
echo "[run] total wall time $(( $(date +%s) - start )) s"
