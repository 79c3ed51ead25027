#!/usr/bin/env bash
# ICAE autoencodes on real weights: overfit 2 passages of 64 tokens into 16 slots each on the packaged
# SmolLM2 (conf/experiment/icae_overfit.yaml), then decode them back — the 2 trained on, and 2 held out.
#
#   scripts/icae_overfit.sh [TEXT]        TEXT: a .txt corpus (default ../shared/data/tinyshakespeare.txt)
# Env: PASSAGES (default 2: trained on, and decoded back; as many held out), OUT (default outputs/icae_overfit), EXTRA (more train overrides, e.g. trainer.max_steps=600), PYTHON.
# Prints the two reconstruction tables (BLEU-4, exact match, token accuracy ± SE); reruns resume.
set -euo pipefail
cd "$(dirname "$0")/.."
TEXT=${1:-../shared/data/tinyshakespeare.txt}
OUT=${OUT:-outputs/icae_overfit}
PY=${PYTHON:-python}
N=${PASSAGES:-2}
# shellcheck disable=SC2086
"$PY" -m ctxbench train experiment=icae_overfit "dataset.path=$TEXT" "hydra.run.dir=$OUT/train" "method.max_examples=$N" trainer.resume=auto ${EXTRA:-}
EVAL=(eval task=reconstruction method=icae "checkpoint=$OUT/train" dataset=text "dataset.path=$TEXT"
      dataset.max_chars=40000 "task.lengths=[64]" "task.windows=$N" task.extra_tokens=0)
"$PY" -m ctxbench "${EVAL[@]}" "hydra.run.dir=$OUT/trained_on"                            # the N trained on: tokens 0..64N-1
"$PY" -m ctxbench "${EVAL[@]}" task.skip_tokens=4096 "hydra.run.dir=$OUT/held_out"          # N held out: from token 4096
for d in trained_on held_out; do echo "== $d"; cat "$OUT/$d/results.md"; done
