"""python -m ctxbench.methods.lococo_ppl_table end to end on the tiny model: one subprocess per method, a table, a plot.

Shows the side CLI's contract on the real text: fixed-cache methods hold the same KV bytes at every
length while the full cache grows, the drop-only LoCoCo row really runs with λ = 0, and a second run
into the same folder reuses the per-method results instead of measuring again.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run(out: Path, text: Path, *extra: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "ctxbench.methods.lococo_ppl_table", "--model", "tiny", "--text", str(text),
            "--start-char", "1000", "--lengths", "128", "256", "--table-length", "256", "--segment-len", "32",
            "--mem-size", "64", "--out", str(out), "--jobs", "2", *extra]
    return subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=300)


def test_table_plot_and_flat_fixed_cache_memory(shared_data, tmp_path):
    text = shared_data / "tinyshakespeare.txt"
    labels = ["full_cache", "streamingllm", "lococo (drop, λ=0)"]
    proc = run(tmp_path, text, "--methods", *labels)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads((tmp_path / "results.json").read_text())["results"]
    assert set(res) == set(labels)
    kv = {k: [a["kv_bytes"] for a in r["at"]] for k, r in res.items()}
    assert kv["full_cache"][1] == 2 * kv["full_cache"][0]  # 128 → 256 tokens: the full cache doubles
    for k in labels[1:]:
        assert kv[k][0] == kv[k][1] and all(a["kv_slots"] == 64 for a in res[k]["at"])
    assert res["lococo (drop, λ=0)"]["normalizer_mean"] == 0.0
    table = (tmp_path / "table.md").read_text()
    assert "PPL @ 256" in table and "the text from character 1,000" in table
    assert (tmp_path / "lococo_ppl_memory.png").stat().st_size > 10_000

    again = run(tmp_path, text, "--methods", "streamingllm")
    assert again.returncode == 0 and "reused" in again.stdout


def test_calibrated_row_needs_a_checkpoint(shared_data, tmp_path):
    proc = run(tmp_path, shared_data / "tinyshakespeare.txt", "--methods", "lococo (calibrated)")
    assert proc.returncode != 0 and "needs --checkpoint" in (proc.stderr + proc.stdout)


def calibrate(tmp: Path, name: str, *overrides: str) -> Path:
    """A one-step `train method=lococo` run on the tiny model (B=32, M=64, as run() measures)."""
    out = tmp / name
    argv = [sys.executable, "-m", "ctxbench", "train", "method=lococo", "model=tiny", "dataset=shakespeare_sample",
            "method.segment_len=32", "method.mem_size=64", "method.n_segments=4", "method.kernel_size=5",
            "trainer.max_steps=1", "trainer.batch_size=1", "trainer.eval_every=0", "trainer.progress=false",
            f"hydra.run.dir={out}", *overrides]
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


def test_reference_row_reads_its_own_calibration(shared_data, tmp_path):
    """The reference row (λ unclamped, local_len 0) needs --ref-checkpoint trained in that setting."""
    text = shared_data / "tinyshakespeare.txt"
    label = "lococo reference (calibrated)"
    proc = run(tmp_path / "none", text, "--methods", label)
    assert proc.returncode != 0 and "needs --ref-checkpoint" in (proc.stderr + proc.stdout)
    cpu = calibrate(tmp_path, "cpu")
    wrong = run(tmp_path / "wrong", text, "--methods", label, "--ref-checkpoint", str(cpu))
    assert wrong.returncode != 0 and "clamp_lambda" in (wrong.stderr + wrong.stdout)
    ref = calibrate(tmp_path, "ref", "method.clamp_lambda=false", "method.local_len=0")
    ok = run(tmp_path / "ok", text, "--methods", label, "lococo (calibrated)", "--ref-checkpoint", str(ref),
             "--checkpoint", str(cpu))
    assert ok.returncode == 0, ok.stderr[-2000:]
    res = json.loads((tmp_path / "ok" / "results.json").read_text())["results"]
    assert set(res) == {label, "lococo (calibrated)"}
    assert all(a["kv_slots"] == 64 for r in res.values() for a in r["at"])
    assert res[label]["at"][-1]["ppl"] != res["lococo (calibrated)"]["at"][-1]["ppl"]
