"""The benchmark suite: `python -m ctxbench bench` writes bench.json + bench.md; each suite measures
what it says (exact vs approximate search, KV growth per method, training-step ratios, the scripted
chat model's replies pass the memory systems' validation). Sizes are tiny; the full suites are run
by `make bench`, not by the tests."""
from __future__ import annotations

import json

import numpy as np
import pytest
from omegaconf import OmegaConf

from ctxbench.config.schemas import load_conf_file
from ctxbench.bench import selected
from ctxbench.bench.common import PeakMemory, percentile
from ctxbench.bench.report import markdown
from ctxbench.bench.retrieval import recall_at_k
from ctxbench.core.registry import UnknownName
from ctxbench.config.compose import command_config, option_config, section_config


def test_bench_retrieval_cli_writes_json_and_markdown(cli, tmp_path):
    out = tmp_path / "run"
    r = cli("bench", "suite=retrieval", "retrieval.sizes=[300,1500]", "retrieval.queries=20",
            "retrieval.dim=32", f"hydra.run.dir={out}")
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads((out / "bench.json").read_text())
    m = doc["machine"]
    for key in ("cpu_count", "torch_threads", "torch_version", "git", "timestamp"):
        assert key in m, key
    assert "commit" in m["git"] and m["cpu_count"] >= 1 and m["torch_threads"] >= 1
    assert doc["command"].startswith("python -m ctxbench bench") and "suite=retrieval" in doc["command"]
    assert list(doc["suites"]) == ["retrieval"]
    res = doc["suites"]["retrieval"]
    assert res["status"] == "ok", res
    rows = res["rows"]
    assert {(r["memories"], r["index"]) for r in rows} == {(n, k) for n in (300, 1500) for k in ("flat", "hnsw", "ivf")}
    for row in rows:
        assert 0.0 <= row["recall_at_k"] <= 1.0
        assert row["p50_ms"] > 0 and row["p99_ms"] >= row["p50_ms"]
        if row["index"] == "flat":
            assert row["recall_at_k"] == 1.0 and row["speedup_vs_flat"] == 1.0
    md = (out / "bench.md").read_text()
    assert "## retrieval" in md and "| memories | index |" in md and "recall@10" in md
    assert md.count("\n| 1,500 |") == 3


def test_unknown_suite_suggests():
    with pytest.raises(UnknownName, match="retrieval"):
        selected(command_config("bench", {"suite": "retreival"}))
    assert selected(command_config("bench", {"suite": "all"}))[0] == "train_step"
    assert selected(command_config("bench", {"suite": "kv_memory,retrieval"})) == ["kv_memory", "retrieval"]


def test_percentile_and_recall():
    assert percentile([1, 2, 3, 4, 5], 50) == 3
    assert percentile([0, 10], 95) == pytest.approx(9.5)
    assert percentile([], 50) is None
    exact = np.array([[1, 2, 3, 4], [5, 6, 7, 8]])
    approx = np.array([[4, 3, 9, 9], [5, 6, 7, 8]])
    assert recall_at_k(approx, exact) == pytest.approx((0.5 + 1.0) / 2)


def test_peak_memory_sees_a_large_allocation():
    with PeakMemory() as m:
        buf = np.ones(64 * 1024 * 1024 // 8)  # 64 MB, touched
        buf.sum()
        del buf
    assert m.delta > 40 * 1024 * 1024


def test_markdown_shows_skipped_rows_and_errors():
    doc = {"command": "python -m ctxbench bench", "machine": {"cpu_count": 2, "git": {"commit": "abc"}},
           "suites": {"kv_memory": {"status": "ok", "columns": [["method", "method"], ["kv_mb", "KV MB"]],
                                    "rows": [{"method": "h2o", "status": "ok", "kv_mb": 0.0625},
                                             {"method": "icae", "status": "skipped", "reason": "not registered"}],
                                    "seconds": 1.0},
                      "retrieval": {"status": "error", "reason": "ValueError: boom", "seconds": 0.0}}}
    md = markdown(doc)
    assert "| h2o | 0.062 |" in md and "| icae | skipped: not registered |" in md
    assert "**error**: ValueError: boom" in md


def test_kv_memory_growth_per_method(tmp_path):
    from ctxbench.bench.kv_memory import run

    cfg = section_config("bench", "kv_memory", {"model": "tiny", "lengths": [256, 512], "max_new_tokens": 1,
                            "methods": ["full_cache", "h2o", "no_such_method"],
                            "overrides": {"h2o": ["method.mem_size=64", "method.segment_len=32"],
                                          "full_cache": ["method.segment_len=32"]}})
    res = run(cfg, {"run_dir": tmp_path})
    ok = {(r["method"], r["tokens"]): r for r in res["rows"] if r["status"] == "ok"}
    full256, full512 = ok[("full_cache", 256)], ok[("full_cache", 512)]
    # tiny: 2 layers x 2 kv heads x 16 head_dim x fp32, keys + values, one slot per token (+ the prompt frame)
    assert full512["memory_items"] - full256["memory_items"] == 256
    assert full256["kv_bytes"] == full256["memory_items"] * 2 * 2 * 16 * 4 * 2
    assert full256["kv_entries"] == full256["memory_items"] * 2 * 2 * 2
    assert ok[("h2o", 256)]["memory_items"] == ok[("h2o", 512)]["memory_items"] == 64
    assert ok[("h2o", 512)]["kv_vs_full"] == pytest.approx(64 / full512["memory_items"], rel=1e-3)
    skipped = [r for r in res["rows"] if r["status"] == "skipped"]
    assert [r["method"] for r in skipped] == ["no_such_method"] and "not registered" in skipped[0]["reason"]


def test_scripted_model_satisfies_memory_systems(shared_data, tmp_path):
    """The bench's scripted chat model gives replies each system accepts (no JSON failures, no unknown prompts)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from memory_scripted import BowEmbedder

    from ctxbench.core import registry
    from ctxbench.bench.scripted_llm import ScriptedChatModel

    samples = registry.build("dataset", option_config("dataset", {"name": "locomo", "path": str(shared_data / "locomo10.json"),
                                                         "conversations": ["conv-26"], "limit": 2}))
    root = Path(__file__).resolve().parents[1] / "conf" / "memory"
    for name in ("mem0", "mem0g", "amem", "memorybank"):
        cfg = load_conf_file(root / f"{name}.yaml")
        cfg.max_sessions, cfg.progress = 1, False
        llm = ScriptedChatModel()
        system = registry.build("memory", cfg, llm=llm, embedder=BowEmbedder(), workdir=tmp_path / name)
        system.ingest(samples[0].history)
        pred = system.answer(samples[0].questions[0])
        assert not llm.unknown, (name, llm.unknown)
        assert llm.meter.get("construction").calls > 0 and pred.usage.memory_items > 0, name
        failures = {k: v for k, v in dict(getattr(system, "counts", {})).items() if "fail" in k or "invalid" in k}
        assert not any(failures.values()), (name, failures)
        out = system.output_counts()
        assert out["invalid_outputs"] == 0 and (out["structured_calls"] > 0) == (name != "memorybank"), (name, out)
        system.close()


def test_memory_systems_rows_from_the_evaluator_configs(tmp_path):
    """measure_system on the shipped locomo_sample: construction calls, latency, tokens, store size."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from memory_scripted import BowEmbedder

    from ctxbench.core import registry
    from ctxbench.bench.common import compose
    from ctxbench.bench.memory_systems import measure_system
    from ctxbench.bench.scripted_llm import ScriptedChatModel

    samples = [s for s in registry.build("dataset", compose("eval", ["dataset=locomo_sample"]).dataset) if s.questions]
    cfg = section_config("bench", "memory_systems", {"questions": 2, "max_sessions": 1})
    rows = {}
    for name in ("rag", "mem0", "no_context"):
        llm = ScriptedChatModel()
        rows[name] = measure_system(name, samples, llm, BowEmbedder(), tmp_path / name, cfg)
        assert rows[name]["questions"] == 2 * len(samples)
        assert rows[name]["llm_calls_per_conv"] * len(samples) == llm.meter.get("construction").calls
    assert rows["rag"]["llm_calls_per_conv"] == 0 and rows["rag"]["store_kb"] > 0
    assert rows["mem0"]["llm_calls_per_conv"] > 0 and rows["mem0"]["construction_tokens_per_conv"] > 0
    assert rows["mem0"]["tokens_per_question"] > rows["no_context"]["tokens_per_question"] > 0
    assert rows["no_context"]["memory_items_per_conv"] == 0
    for r in rows.values():
        assert r["query_p95_ms"] >= r["query_p50_ms"] > 0


def test_structured_suite_times_both_sides_on_the_same_tokens(tmp_path):
    from ctxbench.bench.structured import run

    cfg = section_config("bench", "structured", {"model": "tiny", "dataset": "locomo_sample", "prompts": 2, "max_new_tokens": 24,
                            "rounds": 1, "context_window": 1024})
    res = run(cfg, {"run_dir": tmp_path})
    assert len(res["rows"]) == 2 and res["ratio"] > 0
    for row in res["rows"]:
        assert 1 <= row["new_tokens"] <= 24 and row["constrained_s"] > 0 and row["free_s"] > 0
        assert row["ratio"] == pytest.approx(row["constrained_s"] / row["free_s"], rel=0.02)
    assert res["params"]["compile_s"] >= 0 and "goal" in res["notes"][0]


def test_kv_press_suite_times_both_sides_of_each_ratio(tmp_path):
    from ctxbench.bench.kv_press import run

    cfg = section_config("bench", "kv_press", {"checks": ["calibration", "presses"], "model": "tiny", "dataset": "shakespeare_sample",
                            "segment_len": 16, "n_segments": 6, "mem_size": 64, "ingest_tokens": 160, "new_tokens": 4,
                            "preset_tokens": 96, "preset_ratio": 0.75,
                            "methods": ["streamingllm", "snapkv", "pyramidkv"], "repeats": 1, "rounds": 1})
    res = run(cfg, {"run_dir": tmp_path})
    (cal,) = res["rows"]
    assert cal["tokens"] == 96 and cal["lococo_step_s"] > 0 and cal["lora_step_s"] > 0
    assert cal["ratio"] == pytest.approx(cal["lococo_step_s"] / cal["lora_step_s"], rel=0.01, abs=6e-4)
    rows = res["tables"][0]["rows"]
    assert [r["method"] for r in rows] == ["streamingllm", "snapkv", "pyramidkv"]
    for r in rows:
        # the ratio is stored to 3 decimals: a slow ingest (0.0102) reads 0.01
        assert r["ingest_vs_forward"] == pytest.approx(r["ingest_tok_s"] / r["plain_forward_tok_s"], rel=0.01, abs=6e-4)
        assert r["decode_tok_s"] > 0 and r["generate_tok_s"] > 0
        assert r["segmented_vs_forward"] > 0  # the plain model in the same segments, timed beside them
    preset = res["tables"][1]["rows"]  # one segment of 96 tokens to M = ceil(0.25 × 96) = 24
    assert [(r["method"], r["segment_len"], r["mem_size"]) for r in preset] == [
        (m, 96, 24) for m in ("streamingllm", "snapkv", "pyramidkv")]
    for r in preset:
        assert r["ingest_vs_forward"] == pytest.approx(r["ingest_tok_s"] / r["plain_forward_tok_s"], rel=0.01, abs=6e-4)
        assert r["met"] == (r["ingest_vs_forward"] >= 0.67) and r["ingest_vs_forward_last"] > 0
        assert "segmented_vs_forward" not in r  # one segment: nothing segmented to compare
    for r in rows + preset:  # a row below the goal names the ops that hold it back, from a profile
        assert r["goal"] == 0.67
        assert ("held_back_by" in r) == (not r["met"])
        if not r["met"]:
            assert "aten::" in r["held_back_by"] and "profiled: forward" in r["held_back_by"]
