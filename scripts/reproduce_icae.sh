#!/usr/bin/env bash
# ICAE (arXiv 2307.06945): pretrain (AE + LM), fine-tune on PwC from that checkpoint, then the table.
#
#   scripts/reproduce_icae.sh [cpu|paper]
#     cpu   (default) SmolLM2-135M, mem 16 x 4, the shipped text / PwC samples, STEPS=20 per stage
#     paper Mistral-7B, mem 128 x 4, LoRA r 128, Pile then PwC (GPU); set STEPS (the stage length) and
#           LAUNCH, e.g. LAUNCH="accelerate launch --multi_gpu --num_processes 8 -m ctxbench"
#
# Env: OUT (default outputs/reproduce/icae_<scale>), STEPS, LAUNCH, EXTRA.
set -euo pipefail
cd "$(dirname "$0")/.."
SCALE=${1:-cpu}
[[ "$SCALE" == cpu || "$SCALE" == paper ]] || { echo "usage: $0 [cpu|paper]" >&2; exit 2; }
OUT=${OUT:-outputs/reproduce/icae_$SCALE}
PY=${PYTHON:-python}
LAUNCH=${LAUNCH:-$PY -m ctxbench}
if [[ "$SCALE" == cpu ]]; then
  STEPS=${STEPS:-20}; KNOBS=()
else
  : "${STEPS:?set STEPS (training steps per stage) for the paper scale}"
  KNOBS=(trainer.precision=bf16 launcher=deepspeed_zero2)
fi
# shellcheck disable=SC2086
$LAUNCH train experiment=icae_pwc_pretrain "scale/icae_pretrain=$SCALE" "trainer.max_steps=$STEPS" \
  "hydra.run.dir=$OUT/pretrain" trainer.resume=auto "${KNOBS[@]}" ${EXTRA:-}
# shellcheck disable=SC2086
$LAUNCH train experiment=icae_pwc_finetune "scale/icae_finetune=$SCALE" "checkpoint=$OUT/pretrain" \
  "trainer.max_steps=$STEPS" "hydra.run.dir=$OUT/finetune" trainer.resume=auto "${KNOBS[@]}" ${EXTRA:-}
"$PY" -m ctxbench report table=icae_pwc "runs=$OUT" "out=$OUT/icae_pwc.md"
