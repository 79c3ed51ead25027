#!/usr/bin/env bash
# Every compression method and memory system on the same LoCoMo questions: report table=locomo_all.
#
#   scripts/reproduce_locomo_all.sh [cpu|full]
#     cpu  (default) packaged SmolLM2-135M + MiniLM, conv-26's first 2 sessions, the 15 questions of
#          categories 1-4 whose evidence lies there (conf/scale/locomo_all/cpu.yaml); the trained methods
#          are trained TRAIN_STEPS steps at their CPU scale first
#     full every conversation, categories 1-4 (1,540 questions), for GPU users: pass the backbone in
#          EXTRA (e.g. EXTRA="model=mistral_7b llm.model=<same weights>") and trained checkpoints in
#          CKPT_<row> (else they are trained at their paper scale: scale/<group>=paper)
#
# Env: DATA (locomo10.json; default data/downloads/locomo10.json: python -m ctxbench data download locomo),
#      OUT (default outputs/reproduce/locomo_all_<scale>), ROWS (default all), TRAIN_STEPS (cpu: 30),
#      CKPT_icae / CKPT_ccm_concat / CKPT_ccm_merge / CKPT_lococo (a trained run folder: skip its training),
#      EXTRA (more overrides for every eval), PYTHON.
# A rerun resumes: finished trainings are kept, each eval resumes in its own run folder.
set -euo pipefail
cd "$(dirname "$0")/.."
SCALE=${1:-cpu}
[[ "$SCALE" == cpu || "$SCALE" == full ]] || { echo "usage: $0 [cpu|full]" >&2; exit 2; }
OUT=${OUT:-outputs/reproduce/locomo_all_$SCALE}
DATA=${DATA:-data/downloads/locomo10.json}
PY=${PYTHON:-python}
TRAIN_STEPS=${TRAIN_STEPS:-30}
ROWS=${ROWS:-icae ccm_concat ccm_merge lococo streamingllm h2o snapkv pyramidkv rag memorybank mem0 mem0g amem memgpt readagent full_context no_context}
[[ -f "$DATA" ]] || { echo "$0: no LoCoMo file at DATA=$DATA (python -m ctxbench data download locomo, or DATA=path)" >&2; exit 2; }
TRAIN_SCALE=cpu; STEPS=("trainer.max_steps=$TRAIN_STEPS")
[[ "$SCALE" == full ]] && { TRAIN_SCALE=paper; STEPS=(); }

train() {  # train DIR ARGS...: once (a finished run folder has train_summary.json)
  local dir=$1; shift
  [[ -f "$dir/train_summary.json" ]] && return 0
  echo "== train $* → $dir"
  "$PY" -m ctxbench train "$@" "${STEPS[@]}" "hydra.run.dir=$dir"
}

checkpoint() {  # checkpoint ROW: the trained run a method row reads (CKPT_<row>, else trained here)
  local row=$1 var="CKPT_$1"
  if [[ -n "${!var:-}" ]]; then echo "${!var}"; return; fi
  case $row in
    icae) train "$OUT/train/icae_pretrain" experiment=icae_pwc_pretrain "scale/icae_pretrain=$TRAIN_SCALE" >&2
          train "$OUT/train/icae" experiment=icae_pwc_finetune "scale/icae_finetune=$TRAIN_SCALE" \
            "checkpoint=$OUT/train/icae_pretrain" >&2 ;;
    ccm_concat|ccm_merge) train "$OUT/train/$row" "experiment=ccm_locomo_${row#ccm_}" "scale/ccm=$TRAIN_SCALE" >&2 ;;
    lococo) train "$OUT/train/lococo" experiment=lococo_pile_lococo "scale/lococo=$TRAIN_SCALE" >&2 ;;
  esac
  echo "$OUT/train/$row"
}

for row in $ROWS; do
  ARGS=("experiment=locomo_all_$row" "scale/locomo_all=$SCALE" "dataset.path=$DATA" "hydra.run.dir=$OUT/$row")
  case $row in icae|ccm_concat|ccm_merge|lococo) ARGS+=("checkpoint=$(checkpoint "$row")") ;; esac
  echo "== locomo_all / $row ($SCALE) → $OUT/$row"
  # shellcheck disable=SC2086
  "$PY" -m ctxbench eval "${ARGS[@]}" ${EXTRA:-}
done
"$PY" -m ctxbench report table=locomo_all "runs=$OUT" "out=$OUT/locomo_all.md"
