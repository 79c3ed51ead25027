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
#      EXTRA (more overrides for every eval), PYTHON,
#      JOBS (rows run at a time, default 2; each gets nproc/JOBS threads: on 2 cores two one-thread rows
#      finish 1.6x sooner than one two-thread row after another; latency columns are then per one thread),
#      LOGS (each row's output, default $OUT/logs/<row>.log).
# A rerun resumes: finished trainings are kept, each eval resumes in its own run folder.
set -euo pipefail
cd "$(dirname "$0")/.."
SCALE=${1:-cpu}
[[ "$SCALE" == cpu || "$SCALE" == full ]] || { echo "usage: $0 [cpu|full]" >&2; exit 2; }
OUT=${OUT:-outputs/reproduce/locomo_all_$SCALE}
DATA=${DATA:-data/downloads/locomo10.json}
PY=${PYTHON:-python}
TRAIN_STEPS=${TRAIN_STEPS:-30}
# the longest rows first (on the CPU slice: A-Mem, MemGPT, Mem0g, Mem0), so JOBS lanes end together; the table's
# row order is the board's (ctxbench/report/papers/locomo_all.yaml), not this one
ROWS=${ROWS:-amem memgpt mem0g mem0 icae ccm_concat ccm_merge lococo memorybank readagent rag streamingllm h2o snapkv pyramidkv full_context no_context}
[[ -f "$DATA" ]] || { echo "$0: no LoCoMo file at DATA=$DATA (python -m ctxbench data download locomo, or DATA=path)" >&2; exit 2; }
TRAIN_SCALE=cpu; STEPS=("trainer.max_steps=$TRAIN_STEPS")
[[ "$SCALE" == full ]] && { TRAIN_SCALE=paper; STEPS=(); }

train() {  # train DIR ARGS...: once (a finished run folder has train_summary.json)
  local dir=$1; shift
  [[ -f "$dir/train_summary.json" ]] && return 0
  echo "== train $* → $dir"
  "$PY" -m ctxbench train "$@" "${STEPS[@]}" trainer.resume=auto "hydra.run.dir=$dir"
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

one_row() {  # one_row ROW: its trainings (if any), then its eval
  local row=$1
  ARGS=("experiment=locomo_all_$row" "scale/locomo_all=$SCALE" "dataset.path=$DATA" "hydra.run.dir=$OUT/$row")
  local ck
  case $row in icae|ccm_concat|ccm_merge|lococo) ck=$(checkpoint "$row") || return 1; ARGS+=("checkpoint=$ck") ;; esac
  echo "== locomo_all / $row ($SCALE) → $OUT/$row"
  # shellcheck disable=SC2086
  "$PY" -m ctxbench eval "${ARGS[@]}" ${EXTRA:-}
}

JOBS=${JOBS:-2}
LOGS=${LOGS:-$OUT/logs}
mkdir -p "$LOGS"
NCPU=$(nproc 2>/dev/null || echo 2)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( NCPU / JOBS > 0 ? NCPU / JOBS : 1 ))}
declare -A PIDS=()
failed=()
reap() {  # reap: wait until a running row ends; name it, and record it if it failed
  wait -n || true
  for r in "${!PIDS[@]}"; do
    kill -0 "${PIDS[$r]}" 2>/dev/null && continue
    local rc; rc=$(cat "$LOGS/$r.rc" 2>/dev/null || echo "?")
    if [[ "$rc" == 0 ]]; then echo "-- $r done"; else failed+=("$r"); echo "!! $r failed (exit $rc): $LOGS/$r.log" >&2; fi
    unset "PIDS[$r]"
  done
}
for row in $ROWS; do
  while (( ${#PIDS[@]} >= JOBS )); do reap; done
  echo "== $row (log: $LOGS/$row.log; $OMP_NUM_THREADS thread(s))"
  rm -f "$LOGS/$row.rc"
  ( set +e; one_row "$row" > "$LOGS/$row.log" 2>&1; echo $? > "$LOGS/$row.rc" ) &
  PIDS[$row]=$!
done
while (( ${#PIDS[@]} > 0 )); do reap; done
(( ${#failed[@]} == 0 )) || { echo "$0: rows failed: ${failed[*]} (their logs are in $LOGS; a rerun resumes)" >&2; exit 1; }
"$PY" -m ctxbench report table=locomo_all "runs=$OUT" "out=$OUT/locomo_all.md"
