#!/usr/bin/env bash
# The headline cells of findings 11 and 16 (docs/findings.md, #50) over 3 seeds: seed k trains with
# train.seed + k (initialisation and data order); seed 0 is the single-seed run of the finding,
# bitwise. Finding 8's width ladder (scripts/findings_ladder.sh), 150 steps, at d_model 64, 128, 256:
#   11  AdamW at 4.6e-4, 2.2e-3, 0.01 and Muon (adjust_lr original) at 0.01, 0.046, 0.22: the best
#       learning rate of each and the gap between their best losses;
#   16  AdamW, standard at 1e-3, 2e-3, 4e-3 and μP (base width 64) at 2e-3, 4e-3, 8e-3 (at d 64,
#       where the two are one model, 1e-3 to 8e-3): the best learning rate per width and what
#       tuning at d 64 costs.
# Usage: scripts/findings_seeds.sh [OUT_DIR] (default runs/findings); needs build/normlab.
# JOBS (default 2) and SEEDS (default 3) may be set. scripts/findings_seeds_tables.py OUT_DIR
# prints the tables of docs/findings.md.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/findings}
NL=${NORMLAB:-build/normlab}
STEPS=150
WARMUP=15
JOBS=${JOBS:-2}
SEEDS=${SEEDS:-3}
source scripts/findings_ladder.sh
# finding 11's grid is 1e-4:1:7log; three of its points, as the sweep writes them (6 digits).
L11_ADAMW=optim.lr=0.000464159,0.00215443,0.01
L11_MUON=optim.lr=0.01,0.0464159,0.215443
mkdir -p "$OUT/seeds"
for d in 64 128 256; do
  W=($(width $d))
  $NL sweep "${COMMON[@]}" "${W[@]}" --grid "$L11_ADAMW" --seeds "$SEEDS" \
    --out "$OUT/seeds/f11_d${d}_adamw" -j "$JOBS"
  $NL sweep "${COMMON[@]}" "${W[@]}" --set optim.name=muon --grid "$L11_MUON" --seeds "$SEEDS" \
    --out "$OUT/seeds/f11_d${d}_muon" -j "$JOBS"
  if [ "$d" = 64 ]; then
    $NL sweep "${COMMON[@]}" "${W[@]}" --set model.mup_base_width=64 \
      --grid optim.lr=1e-3,2e-3,4e-3,8e-3 --seeds "$SEEDS" --out "$OUT/seeds/f16_d64_both" -j "$JOBS"
  else
    $NL sweep "${COMMON[@]}" "${W[@]}" --set model.mup_base_width=64 \
      --grid optim.lr=1e-3,2e-3,4e-3 --seeds "$SEEDS" --out "$OUT/seeds/f16_d${d}_standard" -j "$JOBS"
    $NL sweep "${COMMON[@]}" "${W[@]}" --set model.mup_base_width=64 --set model.parametrization=mup \
      --grid optim.lr=2e-3,4e-3,8e-3 --seeds "$SEEDS" --out "$OUT/seeds/f16_d${d}_mup" -j "$JOBS"
  fi
done
echo "findings 11 and 16 over $SEEDS seeds written under $OUT/seeds"
