#!/usr/bin/env bash
# Finding 13's correction (docs/findings.md, #50): which initial scale takes Pre-Norm DyT off the
# unigram plateau? Finding 13's setting (scripts/findings_norm_free.sh: d_model 64, 2 heads, 4
# blocks, 300 steps, 30 warmup, lr 4e-3) over 3 seeds, the four combinations of
# model.init_std (every matrix) and model.embed_init_std (the token embedding, tied with the head):
#   a: 0.02 / 0.02 (the default: the plateau)   b: 0.2 / 0.2 (init_std 0.2 everywhere)
#   c: 0.02 / 0.2 (embedding and head only)     d: 0.2 / 0.02 (blocks only)
# Usage: scripts/findings_dyt_init.sh [OUT_DIR] (default runs/findings); needs build/normlab (or
# NORMLAB=path). STEPS (default 300), SEEDS (default 3) and JOBS (default 2) may be set.
# scripts/findings_dyt_init_tables.py OUT_DIR prints the tables of docs/findings.md.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/findings}/norm_free
NL=${NORMLAB:-build/normlab}
STEPS=${STEPS:-300}
SEEDS=${SEEDS:-3}
JOBS=${JOBS:-2}
WARMUP=$(( STEPS / 10 ))
source scripts/findings_ladder.sh
COMMON+=($(width 64))
mkdir -p "$OUT"
# a and b use no new key (model.embed_init_std unset = init_std); c and d set it.
$NL sweep "${COMMON[@]}" --set model.norm=dyt --set optim.lr=4e-3 \
  --grid model.init_std=0.02,0.2 --seeds "$SEEDS" --out "$OUT/dyt_init/ab" -j "$JOBS"
$NL sweep "${COMMON[@]}" --set model.norm=dyt --set optim.lr=4e-3 --set model.init_std=0.02 \
  --grid model.embed_init_std=0.2 --seeds "$SEEDS" --out "$OUT/dyt_init/c" -j "$JOBS"
$NL sweep "${COMMON[@]}" --set model.norm=dyt --set optim.lr=4e-3 --set model.init_std=0.2 \
  --grid model.embed_init_std=0.02 --seeds "$SEEDS" --out "$OUT/dyt_init/d" -j "$JOBS"
echo "finding 13's initial-scale arms written under $OUT/dyt_init"
