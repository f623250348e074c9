#!/usr/bin/env bash
# Finding 13 (docs/findings.md, #37): can the norm be removed? DyT (gamma tanh(alpha x) + beta) and
# Derf (gamma erf(alpha x + s) + beta) against LayerNorm and RMSNorm, in finding 8's setting
# (scripts/findings_ladder.sh: 4 blocks, sequence 64, batches of 8, STEPS steps, 10% warmup,
# cosine to 10%) at d_model 64 (2 heads of 32, d_ff 256):
#   grid/      every norm kind at Pre-, Peri- and Post-Norm over learning rates 1e-3, 4e-3, 1.6e-2
#   alpha/     DyT and Derf at Pre-Norm, lr 4e-3, one initial alpha at every site: 0.05 to 1.6
#   depth/     12 blocks without warmup at lr 2e-3 (finding 2's rate), Pre- and Post-Norm
#   init/      Pre-Norm at lr 4e-3 with larger initial weights (model.init_std 0.1, 0.2)
#   embed/     Pre-Norm at lr 4e-3 with embeddings scaled by sqrt(d_model) = 8 (model.embed_scale)
# Usage: scripts/findings_norm_free.sh [OUT_DIR] (default runs/findings); needs build/normlab (or
# NORMLAB=path). STEPS (default 300) and JOBS (default 2) may be set.
# scripts/findings_norm_free_tables.py OUT_DIR prints the tables of docs/findings.md.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/findings}/norm_free
NL=${NORMLAB:-build/normlab}
STEPS=${STEPS:-300}
JOBS=${JOBS:-2}
WARMUP=$(( STEPS / 10 ))
source scripts/findings_ladder.sh
COMMON+=($(width 64))
NORMS=model.norm=layernorm,rmsnorm,dyt,derf
mkdir -p "$OUT"
$NL sweep "${COMMON[@]}" --grid "$NORMS" --grid model.placement=pre,peri,post \
  --grid optim.lr=1e-3,4e-3,1.6e-2 --out "$OUT/grid" -j "$JOBS"
for a in 0.05 0.2 0.5 0.8 1.6; do
  $NL sweep "${COMMON[@]}" --set optim.lr=4e-3 --set model.dyt_alpha_attn=$a \
    --set model.dyt_alpha_mlp=$a --set model.dyt_alpha_final=$a --grid model.norm=dyt,derf \
    --grid optim.lr=4e-3 --out "$OUT/alpha/a$a" -j "$JOBS"
done
$NL sweep "${COMMON[@]}" --set model.n_layer=12 --set optim.warmup_steps=0 --grid "$NORMS" \
  --grid model.placement=pre,post --grid optim.lr=2e-3 --out "$OUT/depth" -j "$JOBS"
$NL sweep "${COMMON[@]}" --grid model.norm=rmsnorm,dyt,derf --grid model.init_std=0.1,0.2 \
  --grid optim.lr=4e-3 --out "$OUT/init" -j "$JOBS"
$NL sweep "${COMMON[@]}" --set model.embed_scale=8 --grid model.norm=rmsnorm,dyt,derf \
  --grid optim.lr=4e-3 --out "$OUT/embed" -j "$JOBS"
echo "finding 13 (norm removal) written under $OUT"
