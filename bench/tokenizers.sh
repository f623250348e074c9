#!/usr/bin/env bash
# Tokenizer benchmark (issue 13): BPE training time and encode throughput of normlab against the
# `tokenizers` package (and tiktoken for encoding), single-threaded and with THREADS threads, on
# the embedded corpus. Writes the section "Tokenizers" of docs/benchmarks.md; see
# bench/tokenizer_bench.py for what is measured.
#
#   bench/tokenizers.sh
#
# Environment (all optional): BUILD_DIR=build, THREADS=2, ROUNDS=3, REPEAT=3 (encodes per process,
# the best counts), VOCAB=8192, PYTHON (default .venv/bin/python), OUT=docs/benchmarks.md.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-3}
REPEAT=${REPEAT:-3}
VOCAB=${VOCAB:-8192}
OUT=${OUT:-$ROOT/docs/benchmarks.md}
if [ -z "${PYTHON:-}" ]; then
  PYTHON=python3
  [ -x "$ROOT/.venv/bin/python" ] && PYTHON="$ROOT/.venv/bin/python"
fi
cmake --build "$BUILD_DIR" --target normlab -j "$THREADS" >/dev/null
cmd="bench/tokenizers.sh"
for v in THREADS ROUNDS REPEAT VOCAB; do
  case $v in THREADS) d=2 ;; ROUNDS) d=3 ;; REPEAT) d=3 ;; VOCAB) d=8192 ;; esac
  [ "${!v}" != "$d" ] && cmd="$v=\"${!v}\" $cmd"
done
exec "$PYTHON" "$ROOT/bench/tokenizer_bench.py" --normlab "$BUILD_DIR/normlab" --threads "$THREADS" \
  --rounds "$ROUNDS" --repeat "$REPEAT" --vocab-size "$VOCAB" --out "$OUT" --command "$cmd"
