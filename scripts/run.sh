#!/usr/bin/env bash
# The README's first command: installs what is missing (Debian packages), builds normlab, and runs
# the main job: post-, pre- and peri-norm trained on the embedded corpus, compared in a table.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
NORMLAB_SKIP_PYTHON=1 scripts/install-deps.sh
scripts/build.sh -DNORMLAB_TESTS=OFF
build/normlab compare --config configs/compare.toml --out runs/compare "$@"
echo "[run] total wall time $(( $(date +%s) - start )) s"
