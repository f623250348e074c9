#!/usr/bin/env bash
# Finding 14 (docs/findings.md, #37): nGPT's claim at this scale. Does the normalized Transformer
# (model.placement = ngpt) reach a target validation loss in fewer steps than Pre-Norm, and how
# sensitive is it to the learning rate?
# Finding 8's setting (scripts/findings_ladder.sh) at width 64 (2 heads of 32), 4 blocks, both
# arms with a SwiGLU MLP of d_ff 4 d_model (nGPT's MLP), STEPS steps of 8 x 64 tokens of the
# embedded corpus, validation on 8 batches every 25 steps. Pre-Norm: LayerNorm, 10% warmup,
# weight decay 0.1 (the ladder's), cosine to 10%. nGPT: the paper's recipe, no warmup, no weight
# decay, the same cosine. One learning-rate grid (x2 steps) for both; nGPT again at ngpt-pytorch's
# alpha_init (1 / n_layer); two more seeds of each arm at its best learning rate.
# Usage: scripts/findings_ngpt.sh [OUT_DIR] (default runs/findings); needs build/normlab (or
# NORMLAB=path). STEPS (default 1000) and JOBS (default 1) may be set.
# scripts/findings_ngpt_tables.py OUT_DIR [--svg docs/findings] prints the tables and draws the
# figure.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/findings}
NL=${NORMLAB:-build/normlab}
STEPS=${STEPS:-1000}
JOBS=${JOBS:-1}
WARMUP=$(( STEPS / 10 ))
source scripts/findings_ladder.sh
W=($(width 64))
COMMON+=(--set model.mlp=swiglu --set train.eval_interval=25 --set train.threads=1)
LRS=optim.lr=1e-3,2e-3,4e-3,8e-3,1.6e-2,3.2e-2
mkdir -p "$OUT/ngpt"
$NL sweep "${COMMON[@]}" "${W[@]}" --grid "$LRS" --out "$OUT/ngpt/pre" -j "$JOBS"
NGPT=(--set model.placement=ngpt --set optim.warmup_steps=0 --set optim.weight_decay=0)
$NL sweep "${COMMON[@]}" "${W[@]}" "${NGPT[@]}" --grid "$LRS" --out "$OUT/ngpt/ngpt" -j "$JOBS"
# nGPT with ngpt-pytorch's initial eigen learning rate 1 / n_layer = 0.25 instead of the paper's
# 0.05 (tuned for 24-36 layers).
$NL sweep "${COMMON[@]}" "${W[@]}" "${NGPT[@]}" --set model.ngpt_alpha_init=0.25 --grid "$LRS" \
  --out "$OUT/ngpt/ngpt_a25" -j "$JOBS"
# Two more seeds of each arm at its own best learning rate on the grid (read from its sweep).
best_lr() {
  python3 -c 'import json,sys; r=[x for x in json.load(open(sys.argv[1]))["runs"] if x.get("status")=="done"]
print(min(r, key=lambda x: x["final_val_loss"])["overrides"]["optim.lr"])' "$OUT/ngpt/$1/sweep.json"
}
$NL sweep "${COMMON[@]}" "${W[@]}" --set optim.lr="$(best_lr pre)" --grid train.seed=2,3 \
  --out "$OUT/ngpt/pre_seeds" -j "$JOBS"
$NL sweep "${COMMON[@]}" "${W[@]}" "${NGPT[@]}" --set optim.lr="$(best_lr ngpt)" \
  --grid train.seed=2,3 --out "$OUT/ngpt/ngpt_seeds" -j "$JOBS"
$NL sweep "${COMMON[@]}" "${W[@]}" "${NGPT[@]}" --set model.ngpt_alpha_init=0.25 \
  --set optim.lr="$(best_lr ngpt_a25)" --grid train.seed=2,3 --out "$OUT/ngpt/ngpt_a25_seeds" \
  -j "$JOBS"
echo "finding 14 written under $OUT/ngpt"
