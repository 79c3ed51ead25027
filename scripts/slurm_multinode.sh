#!/usr/bin/env bash
# Multi-node training on SLURM: one task per node, each task starts `accelerate launch` for its GPUs.
#
#   sbatch --nodes=2 --gpus-per-node=8 scripts/slurm_multinode.sh method=icae_paper_pretrain \
#       model=mistral_7b dataset=pile trainer.precision=bf16
#   LAUNCHER=deepspeed_zero3 sbatch --nodes=4 scripts/slurm_multinode.sh method=lococo_paper model=llama2_7b ...
#
# Environment knobs:
#   LAUNCHER      multinode (DDP, default) | deepspeed_zero3 | deepspeed_zero2  → launcher=<it>
#   GPUS_PER_NODE default: SLURM_GPUS_ON_NODE, else nvidia-smi's count
#   RUN_DIR       the run folder on a SHARED filesystem, the same for every node (default
#                 $SHARED_DIR/outputs/train/slurm-<jobid>); pinned as hydra.run.dir so all ranks agree
#   MASTER_PORT   default 29500
#
#SBATCH --job-name=ctxbench
#SBATCH --ntasks-per-node=1
#SBATCH --exclusive
#SBATCH --output=slurm-%j.out
set -euo pipefail
: "${SLURM_JOB_ID:?run this under SLURM (sbatch/srun): SLURM_JOB_ID is not set}"
cd "${SLURM_SUBMIT_DIR:-$(dirname "$0")/..}"

NNODES=${SLURM_JOB_NUM_NODES:-${SLURM_NNODES:-1}}
HEAD=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
MASTER_PORT=${MASTER_PORT:-29500}
if [[ -z "${GPUS_PER_NODE:-}" ]]; then
  GPUS_PER_NODE=${SLURM_GPUS_ON_NODE:-$(nvidia-smi -L 2>/dev/null | wc -l)}
fi
(( GPUS_PER_NODE > 0 )) || { echo "slurm_multinode: no GPUs found on the node (set GPUS_PER_NODE)" >&2; exit 2; }
LAUNCHER=${LAUNCHER:-multinode}
SHARED_DIR=${SHARED_DIR:-$PWD}
RUN_DIR=${RUN_DIR:-$SHARED_DIR/outputs/train/slurm-$SLURM_JOB_ID}
mkdir -p "$RUN_DIR"
export CTXBENCH_RUN_ID="slurm-$SLURM_JOB_ID"

echo "slurm_multinode: $NNODES nodes x $GPUS_PER_NODE GPUs, head $HEAD:$MASTER_PORT, launcher=$LAUNCHER, run dir $RUN_DIR"

# One srun task per node; SLURM_NODEID is each node's machine rank. Single quotes: expanded on the node.
srun --ntasks-per-node=1 --nodes="$NNODES" bash -c '
  accelerate launch \
    --num_machines "'"$NNODES"'" --machine_rank "$SLURM_NODEID" \
    --main_process_ip "'"$HEAD"'" --main_process_port "'"$MASTER_PORT"'" \
    --num_processes "'"$((NNODES * GPUS_PER_NODE))"'" --multi_gpu --rdzv_backend static \
    -m ctxbench train launcher='"$LAUNCHER"' "hydra.run.dir='"$RUN_DIR"'" "$@"
' ctxbench "$@"
