#!/usr/bin/env bash
# Fetch the real datasets into data/downloads/ (git-ignored); needs network.
#   scripts/download_data.sh                 # locomo, pwc, pile (first 20k validation documents)
#   scripts/download_data.sh locomo          # just one
# DialSim has no direct link (Google Drive): `python -m ctxbench data download dialsim` prints the steps.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"
if [ "$#" -eq 0 ]; then set -- locomo pwc pile; fi
for name in "$@"; do
  echo "== $name"
  "$PY" -m ctxbench data download "$name"
done
"$PY" -m ctxbench data list
