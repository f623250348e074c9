#!/usr/bin/env bash
# Finding 15 (docs/findings.md, #37): do attention gates or sinks reduce attention-logit growth,
# the attention mass on the first position, and learning-rate sensitivity?
# Finding 8's setting (scripts/findings_ladder.sh: 4 pre-norm blocks, LayerNorm, no QK-Norm,
# sequence 64, GELU MLP, RoPE, batches of 8, STEPS steps, 10% warmup, cosine to 10%, evaluation on 8
# batches at the end, diagnostics every 25 steps) at width WIDTH (default 128: 4 heads of 32),
# AdamW (weight decay 0.1), five variants: no gate or sink, model.attn_gate = head, = elementwise
# (Qiu et al. 2025), model.attn_sink = one (softmax+1), = learned (gpt-oss); over LRS (default
# finding 8's 4.6e-4 .. 0.22, where pre-norm without QK-Norm is unstable at 0.046 and 0.22:
# attention logits in the thousands, loss 0.5 nats above its best). One thread per run.
# Usage: scripts/findings_gates.sh [OUT_DIR] (default runs/findings); needs build/normlab (or
# NORMLAB=path). STEPS (default 150), WIDTH, LRS, SEEDS (default 2), JOBS (default 1) may be set.
# scripts/findings_gates_tables.py OUT_DIR [--svg docs/findings] prints the tables of
# docs/findings.md and writes the figure.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/findings}
NL=${NORMLAB:-build/normlab}
STEPS=${STEPS:-150}
WIDTH=${WIDTH:-128}
LRS=${LRS:-4.6e-4,2.2e-3,0.01,0.046,0.22}
SEEDS=${SEEDS:-2}
JOBS=${JOBS:-1}
WARMUP=$(( STEPS / 10 ))
source scripts/findings_ladder.sh
W=($(width "$WIDTH"))
mkdir -p "$OUT/gates"
$NL sweep "${COMMON[@]}" "${W[@]}" --set train.threads=1 --grid model.attn_gate=none,head,elementwise \
  --grid optim.lr="$LRS" --seeds "$SEEDS" --out "$OUT/gates/gate" -j "$JOBS"
$NL sweep "${COMMON[@]}" "${W[@]}" --set train.threads=1 --grid model.attn_sink=one,learned \
  --grid optim.lr="$LRS" --seeds "$SEEDS" --out "$OUT/gates/sink" -j "$JOBS"
echo "finding 15 written under $OUT/gates"
