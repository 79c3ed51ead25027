"""scripts/gpu_check.sh, the prepared GPU check of issue 42, as the GPU machine will run it.

The GPU machine's Python has torch, transformers, peft and accelerate (and sentence-transformers)
but not hydra-core / omegaconf, datasets, deepspeed, xgrammar, faiss ...: tests/device_python.py
makes a Python with only that. The check must import nothing else, install the wheels that travel
with it offline, and run every part (``SIZE=tiny``: small models on the CPU).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from device_python import device_python

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "gpu_check.sh"
WHEELS = REPO / "build" / "gpu_wheels"
# never imported by the check: not on the GPU machine (or, scipy / scikit-learn, there only for sentence-transformers)
ABSENT = ("datasets", "deepspeed", "xgrammar", "faiss", "wandb", "rouge_score", "nltk", "scipy", "sklearn",
          "evaluate", "jsonschema", "dateutil", "gguf", "matplotlib", "sentence_transformers", "kvpress")
# the train part's examples cut short, so a tiny run takes about a minute on 2 cores
SMALL = ["gpu.warmup_steps=1", "gpu.steps=1", "gpu.methods.lm.overrides=['method.seq_len=256']",
         "gpu.methods.icae.overrides=['method.mem_size=32','method.context_tokens=128','method.lm_tokens=128']",
         "gpu.methods.ccm.overrides=['method.step_tokens=64','method.train_steps=2']",
         "gpu.methods.lococo.overrides=['method.segment_len=64','method.mem_size=64','method.n_segments=2']"]


def test_the_check_imports_nothing_the_gpu_machine_lacks(tmp_path):
    """Every module of the check, what each part imports when it runs, and the registry's discovery (the
    bench command imports every registered module), in a Python holding only the device's packages."""
    exe, env = device_python(tmp_path)
    code = ("import sys\n"
            "import ctxbench.bench.gpu, ctxbench.bench.gpu_smoke, ctxbench.bench.gpu_drift, ctxbench.bench.gpu_generate\n"
            "import ctxbench.bench.gpu_presses, ctxbench.bench.gpu_train, ctxbench.bench.press_drift, ctxbench.bench.kv_press\n"
            "import ctxbench.llm.hf, ctxbench.methods.icae, ctxbench.methods.ccm, ctxbench.methods.lococo, ctxbench.__main__\n"
            "from ctxbench.core.registry import discover\n"
            "discover()\n"
            "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))\n")
    p = subprocess.run([str(exe), "-c", code], env=env, capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    loaded = set(p.stdout.split())
    assert {"torch", "transformers", "omegaconf", "ctxbench"} <= loaded
    assert not loaded & set(ABSENT), loaded & set(ABSENT)


def test_the_device_python_lacks_what_the_gpu_machine_lacks(tmp_path):
    """The harness itself: in it those packages are not installed (find_spec says so), torch is."""
    exe, env = device_python(tmp_path, travel=False)
    code = ("import importlib.util as u\n"
            f"print([n for n in {ABSENT + ('hydra', 'omegaconf')!r} if u.find_spec(n)], bool(u.find_spec('torch')))")
    p = subprocess.run([str(exe), "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert p.stdout.strip() == "[] True", p.stdout + p.stderr


def test_without_hydra_and_without_wheels_the_check_says_how_in_one_line(tmp_path):
    exe, env = device_python(tmp_path, travel=False)
    (tmp_path / "wheels").mkdir()
    env.update(PYTHON=str(exe), GPU_WHEELS=str(tmp_path / "wheels"), SIZE="tiny")
    p = subprocess.run([str(SCRIPT), str(tmp_path / "out")], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and "make gpu-wheels" in p.stderr and "hydra-core" in p.stderr, p.stderr


def test_an_error_row_makes_the_check_fail_and_says_which(tmp_path):
    """A part's row that errs (here: CCM's smoke with step_tokens=0, which fails on its first example) is reported and the exit
    status is 1; the other rows still ran."""
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": sys.executable, "SIZE": "tiny", "OMP_NUM_THREADS": "2"}
    p = subprocess.run([str(SCRIPT), str(out), "gpu.parts=[smoke]", "gpu.smoke.methods.ccm.overrides=['method.step_tokens=0']"],
                       env=env, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert p.returncode == 1, p.stdout[-2000:] + p.stderr[-2000:]
    smoke = json.loads((out / "bench.json").read_text())["suites"]["gpu"]["tables"][0]
    status = {(r["method"], r["check"]): r["status"] for r in smoke["rows"]}
    assert status[("icae", "fp32 CPU vs device")] == status[("icae", "bf16 base, fp32 trainables")] == "ok"
    assert status[("ccm", "fp32 CPU vs device")] == "error"
    assert p.stdout.count("ERROR: ") == 2 and "(2 error row(s))" in p.stdout


@pytest.mark.slow  # ~2 min on 2 busy cores: every part, both wheels installed offline
def test_gpu_check_tiny_runs_every_part_in_a_python_like_the_gpu_machines(tmp_path):
    if not list(WHEELS.glob("*.whl")):
        pytest.skip("no wheels in build/gpu_wheels: run `make gpu-wheels` (needs the network; .ci/run does)")
    exe, env = device_python(tmp_path, travel=False)
    env.update(PYTHON=str(exe), SIZE="tiny", GPU_SITE=str(tmp_path / "gpu_site"), OMP_NUM_THREADS="2")
    out = tmp_path / "out"
    p = subprocess.run([str(SCRIPT), str(out), "gpu.models=[mistral_7b]", *SMALL], env=env, capture_output=True,
                       text=True, timeout=900, cwd=REPO)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    assert "gpu_check: installed" in p.stdout and "(0 error row(s))" in p.stdout
    res = json.loads((out / "bench.json").read_text())["suites"]["gpu"]
    assert res["params"]["parts"] == ["smoke", "drift", "generate", "presses", "train"]
    tables = {t["title"].split(":")[0]: t["rows"] for t in res["tables"]}
    assert set(tables) == {"smoke", "drift", "generate", "presses"}
    for rows in [*tables.values(), res["rows"]]:
        for r in rows:
            assert r["status"] == "ok" or (r["status"] == "skipped" and "CUDA" in r["reason"]), r
    assert {r["method"] for r in tables["presses"]} == {"streamingllm", "h2o", "lococo", "snapkv", "pyramidkv"}
    assert all(r["ingest_tok_s"] > 0 and r["decode_tok_s"] > 0 for r in tables["presses"])
    gen = {r["batch"]: r for r in tables["generate"]}
    assert set(gen) == {1, 8, 32} and all(r["prompts"] == b for b, r in gen.items())
    assert gen[32]["vs_batch_1"] == pytest.approx(gen[32]["tokens_per_s"] / gen[1]["tokens_per_s"], rel=0.01)
    drift = {r["rotation"]: r for r in tables["drift"]}
    assert drift["fp32"]["sink_max"] == 0.0 < drift["bf16"]["sink_max"]
    smoke = tables["smoke"]
    assert len(smoke) == 4 and all(r.get("max_abs_diff", 0) <= 1e-4 for r in smoke)
    assert all(r["trainable_dtypes"] == ["float32"] for r in smoke)
    md = (out / "bench.md").read_text()
    assert "### generate" in md and "### presses" in md and "### smoke" in md and "### drift" in md


def test_rows_are_ok_skipped_or_error_and_a_spent_time_box_starts_no_row():
    from ctxbench.bench.common import Skip
    from ctxbench.bench.gpu_rows import Budget, guarded

    def boom():
        raise RuntimeError("CUDA out of memory.\nTried to allocate 2 GiB")

    def skip():
        raise Skip("flash_attn is not installed")

    budget = Budget(60).start("train", 30)
    assert guarded({"m": "a"}, lambda: {"x": 1}, budget) == [{"m": "a", "status": "ok", "x": 1}]
    assert guarded({"m": "b"}, boom, budget) == [{"m": "b", "status": "error",
                                                  "reason": "RuntimeError: CUDA out of memory."}]
    assert guarded({"m": "c"}, skip, budget)[0] == {"m": "c", "status": "skipped", "reason": "flash_attn is not installed"}
    ran = []
    late = Budget(60).start("train", 0.0, "gpu.train_budget_s")
    assert guarded({"m": "d"}, lambda: ran.append(1) or {}, late) == [
        {"m": "d", "status": "skipped", "reason": "past gpu.train_budget_s=0"}]
    assert Budget(0.0).spent() == "past gpu.budget_s=0" and not ran


def test_kv_press_measures_the_bundle_it_is_handed(monkeypatch):
    """The GPU check hands kv_press.presses its random model: presses measures that one, its ids on the
    model's device, and loads no model of its own (cfg.model only names the method configs' model group)."""
    import torch
    from omegaconf import OmegaConf

    from ctxbench.bench import kv_press
    from ctxbench.bench.gpu_models import build_bundle

    bundle = build_bundle("llama2_7b", "tiny", "sdpa", torch.device("cpu"), False, 0)
    bundle.model.config.use_cache = True
    monkeypatch.setattr(kv_press, "_bundle", lambda model: pytest.fail(f"presses loaded conf/model/{model}"))
    cfg = OmegaConf.create({"model": "llama2_7b", "methods": ["streamingllm"], "dataset": "text_sample",
                            "segment_len": 32, "mem_size": 32, "ingest_tokens": 96, "new_tokens": 2, "repeats": 1})
    rows = kv_press.presses(cfg, bundle=bundle)
    ingest = [r for r in rows if r.get("check") == "ingest+decode"]
    assert [r["method"] for r in ingest] == ["streamingllm"] and ingest[0]["tokens"] == 96
    assert ingest[0]["ingest_tok_s"] > 0 and ingest[0]["plain_forward_tok_s"] > 0
    assert kv_press._clock() <= time.perf_counter()  # on the CPU the clock is perf_counter itself
