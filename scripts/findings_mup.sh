#!/usr/bin/env bash
# Finding 16 (docs/findings.md, #38): does the best learning rate transfer across width under μP?
# Finding 8's width ladder (d_model 64, 128, 256, and 512 for AdamW; head_dim 32, so 2 to 16 heads;
# d_ff = 4 d_model; 4 pre-norm blocks), learning rates in steps of 2x, the standard
# parametrization against μP with base width 64 (model.mup_base_width; at d 64 the two are the same
# model bit for bit), for AdamW (weight decay 0.1) and Muon (adjust_lr original, AdamW at the same
# learning rate for embeddings, gains and biases).
# Every run: STEPS steps of 8 x 64 tokens of the embedded corpus (bytes), 10% warmup, cosine to
# 10%, evaluation on 8 batches at the end, diagnostics every 25 steps (finding 8's setting).
# Usage: scripts/findings_mup.sh [OUT_DIR] (default runs/findings); needs build/normlab (or
# NORMLAB=path). STEPS (default 150), JOBS (default 2), WIDE (default 1: the d 512 arm) and LONG
# (default 1: AdamW at d 64 and 256 for 4 x STEPS steps, 6 learning rates) may be set.
# scripts/findings_mup_tables.py OUT_DIR prints the tables of docs/findings.md.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/findings}
NL=${NORMLAB:-build/normlab}
STEPS=${STEPS:-150}
JOBS=${JOBS:-2}
WIDE=${WIDE:-1}
LONG=${LONG:-1}
WARMUP=$(( STEPS / 10 ))
source scripts/findings_ladder.sh
COMMON+=(--set model.mup_base_width=64)
PARAMS=model.parametrization=standard,mup
ADAMW_LRS=optim.lr=1.25e-4,2.5e-4,5e-4,1e-3,2e-3,4e-3,8e-3,1.6e-2,3.2e-2,6.4e-2
MUON_LRS=optim.lr=2.5e-3,5e-3,1e-2,2e-2,4e-2,8e-2,0.16,0.32
mkdir -p "$OUT/mup"
for d in 256 128 64; do
  W=($(width $d))
  $NL sweep "${COMMON[@]}" "${W[@]}" --grid "$PARAMS" --grid "$ADAMW_LRS" \
    --out "$OUT/mup/d${d}_adamw" -j "$JOBS"
  $NL sweep "${COMMON[@]}" "${W[@]}" --set optim.name=muon --grid "$PARAMS" --grid "$MUON_LRS" \
    --out "$OUT/mup/d${d}_muon" -j "$JOBS"
done
if [ "$WIDE" = 1 ]; then  # d 512, AdamW, the six learning rates around the optima below
  W=($(width 512))
  $NL sweep "${COMMON[@]}" "${W[@]}" --grid "$PARAMS" --grid optim.lr=5e-4,1e-3,2e-3,4e-3,8e-3,1.6e-2 \
    --out "$OUT/mup/d512_adamw" -j "$JOBS"
fi
if [ "$LONG" = 1 ]; then  # does the transfer (and the gap) hold over a 4x longer run?
  for d in 256 64; do
    W=($(width $d))
    $NL sweep "${COMMON[@]}" "${W[@]}" --set train.steps=$(( 4 * STEPS )) \
      --set train.eval_interval=$(( 4 * STEPS )) --set optim.warmup_steps=$(( 4 * WARMUP )) \
      --grid "$PARAMS" --grid optim.lr=5e-4,1e-3,2e-3,4e-3,8e-3,1.6e-2 --out "$OUT/mup/long_d${d}_adamw" -j "$JOBS"
  done
fi
# The coordinate check of this setting (at the best learning rate of d 64 on the grid above).
$NL coordcheck "${COMMON[@]}" --set model.head_dim=32 --set model.n_head=4 --set optim.lr=4e-3 \
  --widths 64,128,256,512 --steps 10 --seeds 2 --out "$OUT/mup/coordcheck"
$NL report "$OUT"/mup/d*_adamw --out "$OUT/mup/adamw_report.html" \
  --title "normlab finding 16: standard against muP, AdamW"
$NL report "$OUT"/mup/d*_muon --out "$OUT/mup/muon_report.html" \
  --title "normlab finding 16: standard against muP, Muon"
echo "finding 16 written under $OUT/mup"
