"""``python -m ctxbench eval ... concurrency=N`` against a loopback OpenAI-compatible server: the same
results as one at a time, recorded in results.json, and a kill -9 mid-run resumes with nothing lost
and nothing answered twice."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ctxbench.bench.loopback_server import serve
from tests.conftest import REPO, run_cli

ENV = {"CTXBENCH_CACHE": os.environ.get("CTXBENCH_CACHE", "/tmp/cbcache"), "OMP_NUM_THREADS": "1"}


def args(url: str, out: Path, *extra: str) -> list[str]:
    return ["eval", "memory=full_context", "dataset=locomo_sample", "llm=openai", "llm.model=loopback",
            f"llm.base_url={url}", "llm.api_key_env=null", "llm.cache=false", "llm.context_window=4096",
            "progress=false", f"hydra.run.dir={out}", *extra]


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def answers(out: Path) -> dict[str, tuple]:
    return {r["id"]: (r["raw_prediction"], r["prediction"], r["usage"]["answer_prompt_tokens"],
                      r["usage"]["answer_calls"]) for r in lines(out / "predictions.jsonl")}


def test_concurrent_eval_equals_sequential_and_records_its_workers(tmp_path):
    with serve(delay_s=0.05, slots=4) as server:
        seq = run_cli(*args(server.base_url, tmp_path / "seq", "concurrency=1"), env=ENV)
        assert seq.returncode == 0, seq.stderr[-3000:]
        peak_seq = server.peak_in_flight
        server.peak_in_flight = 0
        par = run_cli(*args(server.base_url, tmp_path / "par", "llm.concurrency=4", "log_samples=true"), env=ENV)
        assert par.returncode == 0, par.stderr[-3000:]
        assert peak_seq == 1 and server.peak_in_flight == 4
    assert answers(tmp_path / "par") == answers(tmp_path / "seq") and len(answers(tmp_path / "seq")) == 16
    res = json.loads((tmp_path / "par" / "results.json").read_text())
    assert res["concurrency"] == {"workers": 4, "from": "llm.concurrency", "answers": "in parallel"}
    assert res["llm"]["token_counts"]["calls_by_source"] == {"server": 16}  # the loopback server reports usage
    seq_res = json.loads((tmp_path / "seq" / "results.json").read_text())
    assert res["overall"] == seq_res["overall"]
    samples = lines(tmp_path / "par" / "samples.jsonl")
    assert sorted(s["id"] for s in samples) == sorted(answers(tmp_path / "seq"))
    assert all(len(s["calls"]) == 1 and s["calls"][0]["token_source"] == "server" for s in samples)


@pytest.mark.process
def test_concurrent_eval_killed_midway_resumes_without_answering_twice(tmp_path):
    with serve(delay_s=0.25, slots=4) as server:
        clean = run_cli(*args(server.base_url, tmp_path / "clean", "concurrency=4"), env=ENV)
        assert clean.returncode == 0, clean.stderr[-3000:]
        out = tmp_path / "killed"
        proc = subprocess.Popen([sys.executable, "-m", "ctxbench", *args(server.base_url, out, "concurrency=4")],
                                cwd=REPO, env={**os.environ, **ENV}, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        pred = out / "predictions.jsonl"
        deadline = time.time() + 240
        while time.time() < deadline and proc.poll() is None:
            if pred.exists() and len(lines(pred)) >= 5:
                break
            time.sleep(0.005)
        assert proc.poll() is None, "the run ended before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        written = [r["id"] for r in lines(pred)]
        assert 5 <= len(written) < 16 and len(set(written)) == len(written) and not (out / "results.json").exists()
        settle = time.time() + 10
        while server.in_flight and time.time() < settle:  # the killed run's last calls end unanswered
            time.sleep(0.01)
        asked = server.requests
        again = run_cli(*args(server.base_url, out, "concurrency=4"), env=ENV)
        assert again.returncode == 0, again.stderr[-3000:]
        assert server.requests - asked == 16 - len(written)  # the rerun asks only what was not written
    ids = [r["id"] for r in lines(pred)]
    assert sorted(ids) == sorted(answers(tmp_path / "clean")) and len(ids) == 16
    assert answers(out) == answers(tmp_path / "clean")


@pytest.mark.slow  # a bench subprocess (~20-40 s): `make test-slow`
def test_bench_eval_throughput_measures_concurrency_as_a_ratio(tmp_path):
    out = tmp_path / "bench"
    r = run_cli("bench", "suite=eval_throughput", "eval_throughput.checks=[concurrency]",
                "eval_throughput.concurrency.delay_s=0.1", f"hydra.run.dir={out}", env=ENV)
    assert r.returncode == 0, r.stderr[-3000:]
    suite = json.loads((out / "bench.json").read_text())["suites"]["eval_throughput"]
    assert suite["status"] == "ok", suite
    (row,) = suite["rows"]
    assert row["check"] == "concurrency" and row["questions"] == 16 and row["peak_in_flight"] == 4
    assert row["same_answers"] is True  # the workers answered exactly what one at a time answered
    assert row["ratio"] == round(row["base_s"] / row["new_s"], 2) or abs(row["ratio"] - row["base_s"] / row["new_s"]) < 0.05
    assert row["ratio"] > 2.0  # 4 slots: ideally 4x (the goal, >= 3.2x, is judged in the table, not here)
    assert "| concurrency |" in (out / "bench.md").read_text()
