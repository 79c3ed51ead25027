#!/usr/bin/env bash
# LoCoCo (arXiv 2406.05317): train the conv compressor with an M-slot cache, then the table.
#
#   scripts/reproduce_lococo.sh [cpu|paper]
#     cpu   (default) SmolLM2-135M, B=64, M=128 on the shipped text sample, STEPS=20
#     paper Llama-2-7B, 4K -> 32K with M=512 on the Pile, the reference's schedule as composed by
#           conf/scale/lococo/paper.yaml (1000 steps, lr 5e-5 linear, bf16; GPU); LAUNCH for several GPUs
#
# Env: OUT (default outputs/reproduce/lococo_<scale>), STEPS, LAUNCH, EXTRA.
set -euo pipefail
cd "$(dirname "$0")/.."
SCALE=${1:-cpu}
[[ "$SCALE" == cpu || "$SCALE" == paper ]] || { echo "usage: $0 [cpu|paper]" >&2; exit 2; }
OUT=${OUT:-outputs/reproduce/lococo_$SCALE}
PY=${PYTHON:-python}
LAUNCH=${LAUNCH:-$PY -m ctxbench}
if [[ "$SCALE" == cpu ]]; then
  STEPS=${STEPS:-20}; KNOBS=()
else
  STEPS=${STEPS:-1000}
  KNOBS=()  # the trainer settings are in conf/scale/lococo/paper.yaml
fi
# shellcheck disable=SC2086
$LAUNCH train experiment=lococo_pile_lococo "scale/lococo=$SCALE" "trainer.max_steps=$STEPS" \
  "hydra.run.dir=$OUT/lococo" trainer.resume=auto "${KNOBS[@]}" ${EXTRA:-}
"$PY" -m ctxbench report table=lococo_pile "runs=$OUT" "out=$OUT/lococo_pile.md"
