#!/usr/bin/env bash
# Rebuild A-Mem's LoCoMo Table 1 (arXiv 2502.12110, GPT-4o-mini rows) and print ours beside it.
#
#   scripts/reproduce_amem.sh [cpu|paper]
#     cpu   (default) SmolLM2-135M on the shipped 16-question LoCoMo-format sample, here on CPU
#     paper GPT-4o-mini on the full LoCoMo (needs OPENAI_API_KEY and `python -m ctxbench data download locomo`)
#
# Cells run: LoCoMo baseline (full context), ReadAgent, MemoryBank, MemGPT, A-Mem.
# Env: OUT (default outputs/reproduce/amem_<scale>), CELLS (space-separated subset), EXTRA (more overrides).
set -euo pipefail
cd "$(dirname "$0")/.."
SCALE=${1:-cpu}
[[ "$SCALE" == cpu || "$SCALE" == paper ]] || { echo "usage: $0 [cpu|paper]" >&2; exit 2; }
OUT=${OUT:-outputs/reproduce/amem_$SCALE}
CELLS=${CELLS:-locomo readagent memorybank memgpt amem}
PY=${PYTHON:-python}
for cell in $CELLS; do
  echo "== amem_locomo_table1 / $cell ($SCALE) → $OUT/$cell"
  # shellcheck disable=SC2086
  "$PY" -m ctxbench eval "experiment=amem_locomo_table1_$cell" "scale/amem=$SCALE" "hydra.run.dir=$OUT/$cell" ${EXTRA:-}
done
"$PY" -m ctxbench report table=amem_locomo_table1 "runs=$OUT" "out=$OUT/amem_locomo_table1.md"
