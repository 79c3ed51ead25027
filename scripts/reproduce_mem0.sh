#!/usr/bin/env bash
# Rebuild the Mem0 paper's LoCoMo Table 1 (arXiv 2504.19413) and print ours beside it.
#
#   scripts/reproduce_mem0.sh [cpu|paper]
#     cpu   (default) SmolLM2-135M on the shipped LoCoMo-format sample (categories 1-4), F1/B1 only
#     paper GPT-4o-mini on the full LoCoMo, plus the LLM judge J (needs OPENAI_API_KEY and the data download)
#
# Cells run: LoCoMo (full context), ReadAgent, MemoryBank, MemGPT, A-Mem* (Mem0's re-run), Mem0, Mem0g
# (LangMem, Zep and OpenAI memory are products outside ctxbench: their published rows are shown only).
# Env: OUT (default outputs/reproduce/mem0_<scale>), CELLS, EXTRA.
set -euo pipefail
cd "$(dirname "$0")/.."
SCALE=${1:-cpu}
[[ "$SCALE" == cpu || "$SCALE" == paper ]] || { echo "usage: $0 [cpu|paper]" >&2; exit 2; }
OUT=${OUT:-outputs/reproduce/mem0_$SCALE}
CELLS=${CELLS:-locomo readagent memorybank memgpt amem mem0 mem0g}
PY=${PYTHON:-python}
METRICS=()
# eval.yaml's `metrics:` wins over an experiment's, so the judge is asked for here
[[ "$SCALE" == paper ]] && METRICS=("metrics=[f1,f1_set,bleu1,rouge1,rouge2,rougeL,llm_judge]")
for cell in $CELLS; do
  echo "== mem0_locomo_table1 / $cell ($SCALE) → $OUT/$cell"
  # shellcheck disable=SC2086
  "$PY" -m ctxbench eval "experiment=mem0_locomo_table1_$cell" "scale/mem0=$SCALE" "hydra.run.dir=$OUT/$cell" \
    "${METRICS[@]}" ${EXTRA:-}
done
"$PY" -m ctxbench report table=mem0_locomo_table1 "runs=$OUT" "out=$OUT/mem0_locomo_table1.md"
