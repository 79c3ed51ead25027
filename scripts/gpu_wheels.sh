#!/usr/bin/env bash
# The wheels that travel with the GPU check (scripts/gpu_check.sh): the packages `bench suite=gpu` imports
# that the GPU machine's Python lacks (hydra-core, omegaconf and omegaconf's antlr4 runtime), at the versions
# this checkout's Python has (the versions the tests ran), pure-python, for Python 3.12. Needs the network.
#
#   scripts/gpu_wheels.sh [DIR]        # default build/gpu_wheels (git-ignored); make gpu-wheels
# Env: PYTHON (default .venv/bin/python if present, else python), PY_VERSION (default 3.12).
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-build/gpu_wheels}
PY=${PYTHON:-$( [[ -x .venv/bin/python ]] && echo .venv/bin/python || echo python )}
PYV=${PY_VERSION:-3.12}
version() { "$PY" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$1"; }
rm -rf "$DIR" && mkdir -p "$DIR"
# wheels on PyPI: the py3-none-any ones, for the machine's Python
"$PY" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: --python-version "$PYV" \
  --implementation py --abi none --platform any -d "$DIR" \
  "hydra-core==$(version hydra-core)" "omegaconf==$(version omegaconf)"
# antlr4-python3-runtime 4.9.x is an sdist only: built into a pure-python wheel here
"$PY" -m pip wheel --quiet --disable-pip-version-check --no-deps -w "$DIR" "antlr4-python3-runtime==$(version antlr4-python3-runtime)"
ls -l "$DIR"
du -sh "$DIR"
