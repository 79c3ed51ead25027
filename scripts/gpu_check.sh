#!/usr/bin/env bash
# The GPU check: bf16 training steps of LoRA-LM, ICAE, CCM and LoCoCo on Llama-2-7B and Mistral-7B shapes
# initialised at random (no weights are downloaded), with SDPA and, where flash_attn imports,
# FlashAttention-2; tokens/s, MFU and peak GPU memory per cell in <out>/bench.json (table: bench.md).
#
#   scripts/gpu_check.sh [OUT] [bench overrides ...]     # one GPU: under 8 minutes on an H200
#   scripts/gpu_check.sh outputs/gpu_check gpu.peak_flops=989e12 gpu.attention=[sdpa]
#   SIZE=tiny scripts/gpu_check.sh                       # no GPU: the same steps on small models, on CPU
#
# Env: PYTHON (default python), SIZE (7b | tiny, default 7b). MFU takes gpu.peak_flops (default the
# H200's 989 TFLOPS bf16 dense); pass the peak of another GPU (H100 SXM 989e12, A100 312e12).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-outputs/gpu_check/$(date +%Y-%m-%d_%H-%M-%S)}
[[ $# -gt 0 ]] && shift
PY=${PYTHON:-python}
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 WANDB_MODE=disabled
"$PY" -m ctxbench bench suite=gpu "gpu.size=${SIZE:-7b}" "hydra.run.dir=$OUT" "$@"
"$PY" - "$OUT/bench.json" <<'PY'
import json, sys
res = json.load(open(sys.argv[1]))["suites"]["gpu"]
if res.get("status") != "ok":
    sys.exit(f"gpu check {res.get('status')}: {res.get('reason')}")
rows = res["rows"]
bad = [r for r in rows if r["status"] == "error"]
for r in rows:
    if r["status"] == "ok":
        mem = f"{r['peak_mem_gb']} GB" if r["peak_mem_gb"] is not None else f"{r['peak_rss_mb']} MB RSS"
        print(f"{r['model']:11} {r['attention']:18} {r['method']:7} {r['tokens_per_s']:>10} tok/s  "
              f"MFU {r['mfu']:<8}  peak {mem}")
    else:
        print(f"{r['model']:11} {r['attention']:18} {r['method']:7} {r['status']}: {r['reason']}")
print(f"wrote {sys.argv[1]}")
sys.exit(1 if bad else 0)
PY
