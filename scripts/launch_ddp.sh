#!/usr/bin/env bash
# Data-parallel training on one machine through accelerate (the documented form):
#
#   scripts/launch_ddp.sh [NPROC] [ctxbench train overrides ...]
#   scripts/launch_ddp.sh 4 method=icae_finetune dataset=pwc model=mistral_7b launcher=deepspeed_zero2
#
# which runs
#   accelerate launch --multi_gpu --num_processes NPROC --main_process_port PORT \
#       -m ctxbench train launcher=ddp hydra.run.dir=outputs/train/<stamp>_ddp <overrides>
#
# - launcher=ddp unless the overrides pick another (ddp | deepspeed_zero2 | deepspeed_zero3 | multinode).
# - The run folder is pinned here (every rank would otherwise resolve ${now:} on its own); rank 0
#   writes metrics.jsonl, checkpoints and .hydra/. Set RUN_DIR to choose it.
# - No GPU: the processes run on CPU (ACCELERATE_USE_CPU=1; `--cpu --num_processes 2` would silently
#   start one process) and DeepSpeed uses gloo.
set -euo pipefail
cd "$(dirname "$0")/.."

NPROC=${1:-2}
if [[ $# -gt 0 && "$1" =~ ^[0-9]+$ ]]; then shift; fi
PORT=${MASTER_PORT:-$((29500 + RANDOM % 1000))}
RUN_DIR=${RUN_DIR:-outputs/train/$(date +%Y-%m-%d_%H-%M-%S)_ddp${NPROC}}
ACCELERATE=${ACCELERATE:-accelerate}
PY=${PYTHON:-python}

launcher=launcher=ddp
for a in "$@"; do [[ "$a" == launcher=* ]] && launcher=""; done

if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  export ACCELERATE_USE_CPU=1 DS_ACCELERATOR=${DS_ACCELERATOR:-cpu}
  echo "launch_ddp: no GPU found; running $NPROC CPU processes (gloo)" >&2
fi
export CTXBENCH_RUN_ID=${CTXBENCH_RUN_ID:-$(basename "$RUN_DIR")}

set -x
exec "$ACCELERATE" launch --multi_gpu --num_processes "$NPROC" --num_machines 1 --main_process_port "$PORT" \
  -m ctxbench train $launcher "hydra.run.dir=$RUN_DIR" "$@"
