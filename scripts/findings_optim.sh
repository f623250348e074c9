#!/usr/bin/env bash
# Findings 11 and 12 (docs/findings.md, #36): the optimizers of today's LLM training at this scale.
#   11  Muon against AdamW across width: finding 8's width ladder (d_model 64, 128, 256; head_dim
#       32; d_ff = 4 d_model; 4 pre-norm blocks) and learning-rate grid (7 rates, 1e-4 to 1), for
#       AdamW, Muon (adjust_lr original and match_rms_adamw), Muon + QK-Norm and Muon + QK-Clip
#       (tau 50): sensitivity, best learning rate, final loss, the largest attention logit.
#   12  epsilon and update clipping: AdamW's epsilon from 1e-6 to 1e-15 against Adam-atan2 at each
#       width (3 learning rates around the best), and StableAdamW against gradient clipping on
#       runs that spike (d 128 and 256 at lr 0.046, 0.1, 0.22, every step logged, guards off).
# Every run: STEPS steps of 8 x 64 tokens of the embedded corpus (bytes), 10% warmup, cosine to
# 10%, evaluation on 8 batches at the end, diagnostics every 25 steps (as finding 8).
# Usage: scripts/findings_optim.sh [OUT_DIR] (default runs/findings); needs build/normlab.
# STEPS (default 150) and JOBS (default 2) may be set; PART=11 or PART=12 runs one finding.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/findings}
NL=${NORMLAB:-build/normlab}
STEPS=${STEPS:-150}
JOBS=${JOBS:-2}
PART=${PART:-all}
WARMUP=$(( STEPS / 10 ))
source scripts/findings_ladder.sh
LRS=optim.lr=1e-4:1:7log

if [ "$PART" = all ] || [ "$PART" = 11 ]; then
  mkdir -p "$OUT/optim"
  for d in 256 128 64; do
    W=($(width $d))
    $NL sweep "${COMMON[@]}" "${W[@]}" --grid optim.name=adamw,muon --grid "$LRS" \
      --out "$OUT/optim/d${d}_adamw_muon" -j "$JOBS"
    $NL sweep "${COMMON[@]}" "${W[@]}" --set optim.name=muon --set optim.muon.adjust_lr=match_rms_adamw \
      --grid "$LRS" --out "$OUT/optim/d${d}_muon_match" -j "$JOBS"
    $NL sweep "${COMMON[@]}" "${W[@]}" --set optim.name=muon --grid model.qk_norm=rmsnorm \
      --grid "$LRS" --out "$OUT/optim/d${d}_muon_qknorm" -j "$JOBS"
    $NL sweep "${COMMON[@]}" "${W[@]}" --set optim.name=muon --grid optim.qk_clip=50 \
      --grid "$LRS" --out "$OUT/optim/d${d}_muon_qkclip" -j "$JOBS"
  done
  $NL report "$OUT"/optim/d* --out "$OUT/optim/report.html" \
    --title "normlab finding 11: Muon against AdamW across width"
  # The figures of docs/findings.md: adjust_lr (docs/findings/optim_best_lr.svg,
  # optim_sensitivity.svg: scaling_*.svg) and the logit arms (optim_attn_logit_vs_lr.svg).
  $NL report "$OUT"/optim/d*_adamw_muon "$OUT"/optim/d*_muon_match --out "$OUT/optim/adjust_report.html" \
    --title "normlab finding 11: AdamW, Muon original, Muon match_rms_adamw"
  $NL report "$OUT"/optim/d*_adamw_muon "$OUT"/optim/d*_muon_qknorm "$OUT"/optim/d*_muon_qkclip \
    --out "$OUT/optim/logit_report.html" --title "normlab finding 11: Muon with QK-Norm and QK-Clip"
fi

if [ "$PART" = all ] || [ "$PART" = 12 ]; then
  mkdir -p "$OUT/eps"
  for d in 256 128 64; do
    W=($(width $d))
    $NL sweep "${COMMON[@]}" "${W[@]}" --grid optim.eps=1e-6,1e-8,1e-10,1e-12,1e-15 \
      --grid optim.lr=2.2e-3,1e-2,4.6e-2 --out "$OUT/eps/d${d}_adamw_eps" -j "$JOBS"
    $NL sweep "${COMMON[@]}" "${W[@]}" --set optim.name=adam_atan2 \
      --grid optim.lr=2.2e-3,1e-2,4.6e-2 --out "$OUT/eps/d${d}_atan2" -j "$JOBS"
  done
  for d in 256 128; do
    W=($(width $d))
    $NL sweep "${COMMON[@]}" "${W[@]}" --set train.log_interval=1 --set train.spike_policy=off \
      --set diag.interval=5 --grid optim.name=adamw,stable_adamw --grid optim.grad_clip=0,1 \
      --grid optim.lr=0.046,0.1,0.22 --out "$OUT/eps/d${d}_spikes" -j "$JOBS"
  done
  $NL report "$OUT"/eps/d* --out "$OUT/eps/report.html" \
    --title "normlab finding 12: epsilon and update clipping"
fi
echo "findings 11-12 written under $OUT"
