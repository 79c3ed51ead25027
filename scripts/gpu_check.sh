#!/usr/bin/env bash
# The GPU check (issue 42): one command, under 8 minutes on one H200, every model at random init (no
# weights travel). Parts, each time-boxed, each a table in <OUT>/bench.md (all rows in <OUT>/bench.json):
#   smoke     one ICAE and one CCM step on the GPU = the CPU's in fp32 (to 1e-4); fp32 trainables under a bf16 base
#   drift     StreamingLLM's bf16 key drift after 400 segments, before and after its fix
#   generate  llm=hf chat_batch at batch 1 / 8 / 32 on the Llama-2-7B shape in bf16: generated tokens/s
#   presses   each press's ingest and decode vs a plain forward / generate (bench kv_press's own measurement)
#   train     bf16 steps of LoRA-LM, ICAE, CCM, LoCoCo on Llama-2-7B / Mistral-7B shapes: tokens/s, MFU, peak GB
#
#   make gpu-wheels                                      # once, with the network: build/gpu_wheels/ (hydra-core, omegaconf, antlr4)
#   scripts/gpu_check.sh [OUT] [bench overrides ...]     # on the GPU machine, from the repo root (no pip install -e .)
#   scripts/gpu_check.sh outputs/gpu_check gpu.peak_flops=989e12 gpu.parts=[smoke,train]
#   SIZE=tiny scripts/gpu_check.sh                       # no GPU: every part on small models, on CPU (CI runs this)
#
# The packages the GPU machine lacks travel as wheels in build/gpu_wheels/ (GPU_WHEELS=...): when hydra or
# omegaconf does not import, they are installed offline into build/gpu_site/ (pip --no-index --target, or
# unzipped where pip is missing) and put on PYTHONPATH; nothing else is installed or needed.
# Env: PYTHON (default python), SIZE (7b | tiny, default 7b), GPU_WHEELS, GPU_SITE. MFU takes gpu.peak_flops
# (default the H200's 989 TFLOPS bf16 dense; H100 SXM 989e12, A100 312e12). Exit status 1 when any row is an error.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-outputs/gpu_check/$(date +%Y-%m-%d_%H-%M-%S)}
[[ $# -gt 0 ]] && shift
PY=${PYTHON:-python}
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WANDB_MODE=disabled
export CTXBENCH_CACHE=${CTXBENCH_CACHE:-$PWD/build/gpu_cache}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

if ! "$PY" -c "import hydra, omegaconf" 2>/dev/null; then
  WHEELS=${GPU_WHEELS:-build/gpu_wheels}
  SITE=${GPU_SITE:-build/gpu_site}
  if ! compgen -G "$WHEELS/*.whl" >/dev/null; then
    echo "gpu_check: hydra-core / omegaconf do not import and $WHEELS holds no wheels: run make gpu-wheels where" \
         "the network is, and carry build/gpu_wheels with the code" >&2
    exit 2
  fi
  mkdir -p "$SITE"
  if "$PY" -m pip --version >/dev/null 2>&1; then
    "$PY" -m pip install --quiet --disable-pip-version-check --no-index --no-deps --upgrade --target "$SITE" "$WHEELS"/*.whl
  else  # pure-python wheels: unpacking one is installing it
    for w in "$WHEELS"/*.whl; do "$PY" -m zipfile -e "$w" "$SITE"; done
  fi
  export PYTHONPATH="$(cd "$SITE" && pwd):$PYTHONPATH"
  "$PY" -c "import hydra, omegaconf" || { echo "gpu_check: the wheels of $WHEELS installed into $SITE but do not import" >&2; exit 2; }
  echo "gpu_check: installed $(ls "$WHEELS" | tr '\n' ' ')into $SITE"
fi

"$PY" -m ctxbench bench suite=gpu "gpu.size=${SIZE:-7b}" "hydra.run.dir=$OUT" "$@"
"$PY" - "$OUT/bench.json" <<'PY'
import json, sys
res = json.load(open(sys.argv[1]))["suites"]["gpu"]
if res.get("status") != "ok":
    sys.exit(f"gpu check {res.get('status')}: {res.get('reason')}")
tables = [{"title": "train", "columns": res["columns"], "rows": res["rows"]}, *res.get("tables", [])]
errors = 0
for t in tables:
    print(f"== {t['title']}")
    keys = [k for k, _ in t["columns"]]
    for r in t["rows"]:
        if r["status"] == "ok":
            print("  " + "  ".join(f"{k}={r[k]}" for k in keys if r.get(k) is not None))
        else:
            errors += r["status"] == "error"
            print(f"  {' '.join(str(r.get(k)) for k in keys[:3] if r.get(k) is not None)}  {r['status'].upper()}: {r.get('reason')}")
print(f"wrote {sys.argv[1]} ({errors} error row(s))")
sys.exit(1 if errors else 0)
PY
