#!/usr/bin/env bash
# CCM (arXiv 2312.03414): CCM-concat and CCM-merge trained on LoCoMo sessions, then the table.
#
#   scripts/reproduce_ccm.sh [cpu|paper]
#     cpu   (default) SmolLM2-135M on the shipped LoCoMo-format sample, STEPS=20
#     paper Llama-2-7B, LoRA r 8 on q,k,v,o, lr 3e-4 cosine warmup 0.03, bf16 (GPU); set STEPS and LAUNCH
#
# Env: OUT (default outputs/reproduce/ccm_<scale>), CELLS, STEPS, LAUNCH, EXTRA.
set -euo pipefail
cd "$(dirname "$0")/.."
SCALE=${1:-cpu}
[[ "$SCALE" == cpu || "$SCALE" == paper ]] || { echo "usage: $0 [cpu|paper]" >&2; exit 2; }
OUT=${OUT:-outputs/reproduce/ccm_$SCALE}
CELLS=${CELLS:-concat merge}
PY=${PYTHON:-python}
LAUNCH=${LAUNCH:-$PY -m ctxbench}
if [[ "$SCALE" == cpu ]]; then
  STEPS=${STEPS:-20}; KNOBS=()
else
  : "${STEPS:?set STEPS (training steps) for the paper scale}"
  KNOBS=(trainer.lr=3e-4 trainer.scheduler=cosine trainer.warmup_ratio=0.03 trainer.precision=bf16)
fi
for cell in $CELLS; do
  # shellcheck disable=SC2086
  $LAUNCH train "experiment=ccm_locomo_$cell" "scale/ccm=$SCALE" "trainer.max_steps=$STEPS" \
    "hydra.run.dir=$OUT/$cell" trainer.resume=auto "${KNOBS[@]}" ${EXTRA:-}
done
"$PY" -m ctxbench report table=ccm_locomo "runs=$OUT" "out=$OUT/ccm_locomo.md"
